"""Every wait for the database is bounded: a request the capacity cannot admit within
``db_deadline_seconds`` answers 503 with Retry-After, and releases and uploads wait in a
capacity of their own (``app.db.capacity``), so cheap requests never queue behind them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from app.db.capacity import Capacity
from app.kit.errors import Unavailable
from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import HOUR
from tests.live_server import live_server, seed_grids

DEADLINE = 3.0  # the smallest db_deadline_seconds accepted
GRIDS = {(30.2672, -97.7431): {f"u{i}": [1.0, 2.0] for i in range(12)}}


def test_a_full_capacity_refuses_after_its_deadline_and_admits_when_freed() -> None:
    async def scenario() -> tuple[float, Unavailable, float]:
        capacity = Capacity(1, 0.3, what="releases")
        taken, done = anyio.Event(), anyio.Event()

        async def holder() -> None:
            async with capacity.held():
                taken.set()
                await done.wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await taken.wait()
            start = time.monotonic()
            with pytest.raises(Unavailable) as refused:
                async with capacity.held():
                    pass
            waited = time.monotonic() - start
            done.set()
        start = time.monotonic()
        async with capacity.held():
            admitted = time.monotonic() - start
        return waited, refused.value, admitted

    waited, refused, admitted = anyio.run(scenario)
    assert 0.3 <= waited < 1.0 and admitted < 0.1
    assert refused.retry_after >= 1 and "releases" in refused.message


def _trickle(ds_lines: int, seconds: float) -> Iterator[bytes]:
    """A CSV body sent a line at a time over ``seconds`` (an upload that holds its turn)."""
    yield b"user_id,timestamp,lat,lon,value\n"
    for i in range(ds_lines):
        time.sleep(seconds / ds_lines)
        ts = HOUR.replace(hour=14).timestamp() + i
        yield f"t{i % 7},{ts:.0f},30.2672,-97.7431,3.0\n".encode()


@pytest.mark.slow
def test_cheap_requests_answer_while_releases_and_uploads_hold_their_capacity(
    postgres_url: str, tmp_path: Path
) -> None:
    env = {"DPGATE_HEAVY_CONCURRENCY": "1", "DPGATE_DB_DEADLINE_SECONDS": str(DEADLINE)}
    with live_server(postgres_url, tmp_path, workers=1, extra_env=env) as server:
        ds, grids = seed_grids(server.url, ADMIN_KEY, "bounded", 100.0, GRIDS)
        auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
        upload: dict[str, httpx.Response] = {}

        def slow_upload() -> None:
            with httpx.Client(base_url=server.url, headers=auth, timeout=60) as c:
                upload["r"] = c.post(
                    f"/datasets/{ds}/records",
                    content=_trickle(40, 3 * DEADLINE),
                    headers={"content-type": "text/csv"},
                )

        thread = threading.Thread(target=slow_upload)
        thread.start()
        time.sleep(1.0)  # the upload holds the one heavy turn
        release = {"slot_start": HOUR.isoformat(), "epsilon": 0.5, "min_users": 1}
        with httpx.Client(base_url=server.url, headers=auth, timeout=30) as c:
            start = time.monotonic()
            refused = c.post(f"/datasets/{ds}/releases", json=release)
            waited = time.monotonic() - start
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "unavailable"
            assert int(refused.headers["Retry-After"]) >= 1
            assert DEADLINE - 0.1 <= waited <= DEADLINE + 1, waited
            for path in (f"/datasets/{ds}/budget", "/keys/me", f"/datasets/{ds}/grids",
                         f"/grids/{grids[0]}/mean?epsilon=0.1"):  # fmt: skip
                start = time.monotonic()
                got = c.get(path)
                took = time.monotonic() - start
                assert got.status_code == 200, (path, got.text)
                assert took < 1.0, (path, took)
            thread.join(timeout=60)
            assert upload["r"].status_code == 200, upload["r"].text
            done = c.post(f"/datasets/{ds}/releases", json=release)
            assert done.status_code == 200, done.text


def test_a_lock_held_elsewhere_costs_at_most_the_deadline(
    migrated_postgres_url: str, tmp_path: Path
) -> None:
    """A request waiting for a row lock another transaction holds (here an upload behind
    a writer of its dataset's row) answers 503 once the deadline passes: every wait
    for a lock is bounded by it (``lock_timeout``)."""
    from fastapi.testclient import TestClient
    from sqlalchemy import create_engine, text

    from app.main import create_app
    from tests.helpers import make_csv
    from tests.operations.conftest import make_settings

    settings = make_settings(migrated_postgres_url, tmp_path, db_deadline_seconds=DEADLINE)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        ds = c.post("/datasets", json={"name": "l", "value_bound": 10, "budget_per_user": 1})
        ds_id = ds.json()["id"]
        holder = create_engine(migrated_postgres_url)
        with holder.begin() as conn:
            conn.execute(text(f"SELECT 1 FROM datasets WHERE id = {ds_id} FOR NO KEY UPDATE"))
            start = time.monotonic()
            up = c.post(
                f"/datasets/{ds_id}/records",
                content=make_csv([("u1", HOUR.isoformat(), 30.2672, -97.7431, 3.0)]),
                headers={"content-type": "text/csv"},
            )
            waited = time.monotonic() - start
        holder.dispose()
        assert up.status_code == 503, up.text
        assert "Retry-After" in up.headers and "lock" in up.json()["error"]["message"]
        assert DEADLINE - 0.1 <= waited <= DEADLINE + 1, waited
        assert c.get(f"/datasets/{ds_id}").json()["n_records"] == 0
