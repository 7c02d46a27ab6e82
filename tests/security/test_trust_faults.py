"""Issue 16, the database and the clock: a Postgres restart costs no request, a
statement that waits too long answers 503, and a body that trickles in forever 408."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.config import Settings
from app.db.liveness import session_parameters
from app.db.migrate import upgrade
from app.main import create_app
from tests.conftest import ADMIN_KEY
from tests.security.private_pg import private_postgres
from tests.security.support import ADMIN, assert_error, bearer, csv_upload_scope, populate

HEADER = b"user_id,timestamp,lat,lon,value\n"


def _app(url: str, tmp: Path, **update: Any) -> FastAPI:
    upgrade(url)
    settings = Settings(
        database_url=url, admin_key=ADMIN_KEY, secret_key="test-secret", secret_file=None
    )
    return create_app(settings.model_copy(update=update))


def test_time_limits_join_the_urls_own_options() -> None:
    url = "postgresql+psycopg://u@h/db?options=-csearch_path%3Ds1"
    params = session_parameters(url, connect_timeout=0.5, statement_timeout=1.25)
    assert params == {
        "connect_timeout": 2,
        "options": "-csearch_path=s1 -c statement_timeout=1250"
        " -c idle_in_transaction_session_timeout=12500",
    }
    assert session_parameters(url, connect_timeout=None, statement_timeout=0) == {}


@pytest.mark.slow
def test_a_postgres_restart_costs_no_request(tmp_path: Path) -> None:
    """Every pooled connection (both pools) is stale after the restart; none of the
    requests after it fails, and ``/readyz`` says 503 only while the server is down."""
    with private_postgres() as pg:
        app = _app(pg.url, tmp_path, db_pool_size=4, query_pool_size=4)
        with TestClient(app, raise_server_exceptions=False) as client:
            world = populate(client)
            grid = world.grid_ids[0]
            analyst = bearer(world.analyst_key)
            counter = iter(range(1, 10**6))

            def query(_: object = None) -> int:
                eps = round(0.001 + next(counter) * 1e-6, 9)  # never a cached twin
                params = {"epsilon": eps, "mechanism": "baseline"}
                return client.get(f"/grids/{grid}/mean", params=params, headers=analyst).status_code

            def admin_read(_: object = None) -> int:
                return client.get(f"/datasets/{world.dataset_id}", headers=ADMIN).status_code

            with ThreadPoolExecutor(8) as pool:  # open several connections in both pools
                assert set(pool.map(query, range(40))) == {200}
                assert set(pool.map(admin_read, range(40))) == {200}
            assert app.state.query_pool.get_stats()["pool_size"] > 1
            pg.stop()
            assert_error(TestClient(app).get("/readyz"), 503, "unavailable")
            pg.start()
            time.sleep(0.6)  # the key cache expires: the next look-up uses a stale connection
            statuses = [query() for _ in range(12)] + [admin_read() for _ in range(12)]
            assert statuses == [200] * 24, statuses
            assert client.get("/readyz").json() == {"status": "ready"}


def test_a_statement_waiting_too_long_answers_503(postgres_url: str, tmp_path: Path) -> None:
    """A lock held elsewhere (here: by hand; in life, e.g. a stuck transaction) makes a
    reset and a query wait; the statement timeout ends the wait with 503, not a hang."""
    app = _app(postgres_url, tmp_path, db_statement_timeout_seconds=0.5)
    with TestClient(app, raise_server_exceptions=False) as client:
        world = populate(client)
        blocker = create_engine(postgres_url)
        try:
            with blocker.connect() as conn, conn.begin():
                conn.execute(
                    text("select id from datasets where id = :d for update"),
                    {"d": world.dataset_id},
                )
                started = time.monotonic()
                reset = client.post(
                    f"/datasets/{world.dataset_id}/budget/reset",
                    json={"reason": "r"},
                    headers=ADMIN,
                )
                mean = client.get(
                    f"/grids/{world.grid_ids[0]}/mean",
                    params={"epsilon": 0.5, "mechanism": "baseline"},
                    headers=ADMIN,
                )
                elapsed = time.monotonic() - started
            assert_error(reset, 503, "unavailable")
            assert_error(mean, 503, "unavailable")
            assert elapsed < 10, elapsed
        finally:
            blocker.dispose()
        # the lock gone, both work (the refused reset changed nothing)
        again = client.post(
            f"/datasets/{world.dataset_id}/budget/reset", json={"reason": "r"}, headers=ADMIN
        )
        assert again.json() == {"epoch": 2}


def test_a_body_trickling_in_past_the_deadline_is_408(db_url: str, tmp_path: Path) -> None:
    """Each part arrives well within the stall limit, but the whole body takes longer
    than ``body_deadline_seconds``: 408, nothing written, the dataset free again."""
    app = _app(db_url, tmp_path, body_timeout_seconds=30, body_deadline_seconds=1.0)
    with TestClient(app, raise_server_exceptions=False) as client:
        world = populate(client)

    async def trickling_upload() -> tuple[int, bytes, float]:
        sent: list[dict] = []
        rows = [f"trickle,{1709632800 + k},30.2672,-97.7431,1\n".encode() for k in range(40)]
        parts = [HEADER, *rows]

        async def receive() -> dict:
            await anyio.sleep(0.1)  # a part every 100 ms: never a stall
            return {"type": "http.request", "body": parts.pop(0), "more_body": bool(parts)}

        async def send(message: dict) -> None:
            sent.append(message)

        path = f"/datasets/{world.dataset_id}/records"
        scope = csv_upload_scope(path)
        async with app.router.lifespan_context(app):
            started = time.monotonic()
            with anyio.fail_after(20):
                await app(scope, receive, send)
            elapsed = time.monotonic() - started
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), elapsed

    status, body, elapsed = anyio.run(trickling_upload)
    assert status == 408 and b'"request_timeout"' in body and b"1 s in all" in body, body
    assert 0.9 < elapsed < 3.5, elapsed
    with TestClient(app, raise_server_exceptions=False) as client:
        detail = client.get(f"/datasets/{world.dataset_id}", headers=ADMIN).json()
        assert detail["n_records"] == 16
        reset = client.post(
            f"/datasets/{world.dataset_id}/budget/reset", json={"reason": "r"}, headers=ADMIN
        )
        assert reset.status_code == 200
