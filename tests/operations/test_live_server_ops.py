"""From outside, against ``dpgate serve`` with ``DPGATE_LOG_FORMAT=json``: every line it
writes is one JSON object (migrations, uvicorn's own, access), each request's lines carry
its id, no user identifier or key is logged; ``--version`` and ``/version`` agree; the
CLI's ``budget reset`` goes through the server."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import Engine, make_url

from app.cli.main import main
from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import CELL_A, HOUR
from tests.live_server import LiveServer, live_server

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
# distinctive data-subject ids: none may appear in a log line, raw or hashed
SUBJECTS = [f"subject-{uuid.uuid4().hex[:10]}" for _ in range(12)]


@dataclass
class Served:
    server: LiveServer
    dataset_id: int
    grid_id: str
    analyst_key: str


@pytest.fixture(scope="module")
def served(
    postgres_base_url: str, postgres_admin: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    schema = "t_live_" + uuid.uuid4().hex[:12]
    with postgres_admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    url = make_url(postgres_base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    workdir = tmp_path_factory.mktemp("ops-live")
    env = {"DPGATE_LOG_FORMAT": "json", "DPGATE_METRICS": "public"}
    try:
        with live_server(
            url.render_as_string(hide_password=False),
            workdir,
            workers=1,
            extra_env=env,
            log_level="info",
        ) as server:
            yield _load(server)
    finally:
        with postgres_admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


def _load(server: LiveServer) -> Served:
    with httpx.Client(base_url=server.url, headers=ADMIN) as c:
        ds = c.post("/datasets", json={"name": "ops", "value_bound": 10, "budget_per_user": 1})
        ds_id = ds.json()["id"]
        rows = ["user_id,timestamp,lat,lon,value"] + [
            f"{user},{HOUR.isoformat()},{CELL_A[0]},{CELL_A[1]},{1 + i % 9}"
            for i, user in enumerate(SUBJECTS)
        ]
        up = c.post(
            f"/datasets/{ds_id}/records",
            content="\n".join(rows).encode(),
            headers={"content-type": "text/csv", "X-Request-ID": "ops-upload"},
        )
        assert up.status_code == 200 and up.json()["accepted"] == len(SUBJECTS), up.text
        grid = c.get(f"/datasets/{ds_id}/grids").json()["grids"][0]["grid_id"]
        key = c.post("/keys", json={"name": "ops analyst", "role": "analyst"}).json()["key"]
    return Served(server, ds_id, grid, key)


def test_version_agrees_with_the_command_and_the_package(served: Served) -> None:
    answer = httpx.get(f"{served.server.url}/version").json()
    assert answer["version"] == version("dpgate")
    assert answer["schema_revision"] == answer["schema_head"] is not None
    command = [sys.executable, "-m", "app.cli", "--version"]
    printed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert printed.strip() == f"dpgate {answer['version']}"
    spec = httpx.get(f"{served.server.url}/openapi.json").json()
    assert spec["info"]["version"] == answer["version"]


def test_budget_reset_from_the_command_line(served: Served, capsys) -> None:
    url, ds = served.server.url, served.dataset_id
    reset = ["budget", "reset", "--dataset", str(ds), "--url", url, "--reason", "new month"]
    assert main([*reset, "--key", served.analyst_key]) == 3  # refused: an analyst may not
    assert "admin" in capsys.readouterr().err
    assert main([*reset, "--key", ADMIN_KEY]) == 0
    assert f"dataset {ds}: budget epoch 2 opened" in capsys.readouterr().out
    budget = httpx.get(f"{url}/datasets/{ds}/budget", headers=ADMIN).json()
    assert budget["epoch"] == 2


def test_every_log_line_is_json_with_the_request_id(served: Served) -> None:
    url, auth = served.server.url, {"Authorization": f"Bearer {served.analyst_key}"}
    sent = {
        "ops-mean": httpx.get(
            f"{url}/grids/{served.grid_id}/mean",
            params={"epsilon": 0.5, "mechanism": "baseline"},
            headers={**auth, "X-Request-ID": "ops-mean"},
        ),
        "ops-404": httpx.get(
            f"{url}/datasets/9/grids", headers={**auth, "X-Request-ID": "ops-404"}
        ),
        "ops-400": httpx.get(
            f"{url}/grids/{served.grid_id}/mean",
            params={"epsilon": "1_0"},
            headers={**auth, "X-Request-ID": "ops-400"},
        ),
        "ops-401": httpx.get(f"{url}/datasets", headers={"X-Request-ID": "ops-401"}),
    }
    assert [r.status_code for r in sent.values()] == [200, 404, 400, 401]
    hashes = [
        u["user"]
        for u in httpx.get(f"{url}/datasets/{served.dataset_id}/ledger", headers=ADMIN).json()[
            "users"
        ]
    ]
    assert len(hashes) == len(SUBJECTS)
    text = Path(served.server.log).read_text()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line
    loggers = {r["logger"] for r in records}
    assert {"alembic.runtime.migration", "uvicorn.error", "dpgate.access"} <= loggers, loggers
    access = {r.get("request_id"): r for r in records if r["logger"] == "dpgate.access"}
    for rid, resp in [("ops-upload", None), *sent.items()]:
        assert rid in access, rid
        if resp is not None:
            assert access[rid]["status"] == resp.status_code
            assert resp.headers["x-request-id"] == rid
    assert all(r.get("request_id") for r in records if r["logger"] == "dpgate.access")
    for secret in [*SUBJECTS, *hashes, ADMIN_KEY, served.analyst_key]:
        assert secret not in text, secret
