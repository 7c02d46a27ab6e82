"""A database that stops answering (issue 26): every request answers 503 within
``db_deadline_seconds``, those on connections already open included, and once the
database answers again the service recovers with no lost and no double charge.

The server under test reaches the shared Postgres through a proxy that freezes (a
``SIGSTOP``-ed server as its clients see it: connections accepted, bytes acknowledged,
nothing answered), so the shared server itself is never stopped.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from tests.conftest import ADMIN_KEY
from tests.freezing_proxy import FreezingProxy, freezing_proxy
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR
from tests.live_server import LiveServer, live_server, seed_grids

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
GRIDS = {
    CELL_A: {f"a{i}": [1.0 + (i * j) % 9 for j in range(1 + i % 7)] for i in range(30)},
    CELL_B: {f"b{i}": [2.0 + (i * j) % 7 for j in range(1 + i % 5)] for i in range(30)},
}
DEADLINE = 8.0  # the default of db_deadline_seconds
#: the proxy thaws by itself after this long, so a test of a server that hangs ends
FREEZE_AT_MOST = 25.0


@dataclass
class Frozen:
    server: LiveServer
    proxy: FreezingProxy
    direct_url: str  # the schema, reached without the proxy (for the checks)


@pytest.fixture
def behind_proxy(
    postgres_base_url: str, postgres_admin: Engine, tmp_path: Path
) -> Iterator[Frozen]:
    schema = "t_frozen_" + uuid.uuid4().hex[:12]
    with postgres_admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    options = {"options": f"-csearch_path={schema}"}
    direct = make_url(postgres_base_url).update_query_dict(options).render_as_string(False)
    try:
        with freezing_proxy(postgres_base_url) as proxy:
            url = proxy.url_for(direct)
            json_logs = {"DPGATE_LOG_FORMAT": "json"}
            with live_server(url, tmp_path, workers=1, extra_env=json_logs) as server:
                yield Frozen(server, proxy, direct)
    finally:
        with postgres_admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


def _setup(url: str) -> tuple[int, list[str]]:
    return seed_grids(url, ADMIN_KEY, "frozen", 100, GRIDS)


def _requests(ds: int, grids: list[str], tag: int) -> list[tuple[str, str, dict]]:
    """Every kind of request: queries (the query pool), releases, listings and the
    budget (sessions on database threads), readiness (both pools)."""
    out: list[tuple[str, str, dict]] = []
    for i, grid in enumerate(grids * 8):  # more than the query pool's 10 connections
        eps = 0.01 + tag * 1e-3 + i * 1e-5
        out.append(("GET", f"/grids/{grid}/mean", {"params": {"epsilon": eps}}))
    for i in range(3):
        body = {"slot_start": HOUR.isoformat(), "epsilon": 0.02 + tag * 1e-3 + i * 1e-5}
        out.append(("POST", f"/datasets/{ds}/releases", {"json": {**body, "min_users": 5}}))
    out += [
        ("GET", "/datasets", {}),
        ("GET", f"/datasets/{ds}/budget", {}),
        ("GET", f"/datasets/{ds}/grids", {}),
        ("GET", "/readyz", {}),
    ]
    return out


async def _fire(
    url: str, requests: list[tuple[str, str, dict]], *, stagger: float = 0.0
) -> list[tuple[int, float]]:
    """Status and duration of each request; with ``stagger``, the second half is sent
    that many seconds after the first."""
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as c:

        async def one(i: int, method: str, path: str, kw: dict) -> tuple[int, float]:
            await asyncio.sleep(stagger if i % 2 else 0.0)
            start = time.monotonic()
            r = await c.request(method, path, **kw)
            return r.status_code, time.monotonic() - start

        return await asyncio.gather(*(one(i, *req) for i, req in enumerate(requests)))


def _ledger(url: str, ds: int) -> tuple[dict, Counter, set[str]]:
    engine = create_engine(url)
    with engine.connect() as conn:
        accounts = conn.execute(
            text("select user_id, spent from budget_accounts where dataset_id = :d"), {"d": ds}
        ).all()
        entries = conn.execute(
            text("select epsilon, users from ledger_entries where dataset_id = :d"), {"d": ds}
        ).all()
        answers = conn.execute(
            text("select public_id from query_answers where dataset_id = :d"), {"d": ds}
        ).scalars()
        stored = set(answers)
    engine.dispose()
    from_entries: Counter = Counter()
    for eps, users in entries:
        for u in users:
            from_entries[u] += Decimal(eps)
    return {u: Decimal(s) for u, s in accounts if s}, from_entries, stored


@pytest.mark.slow
def test_frozen_database_answers_503_within_the_deadline_and_recovers(
    behind_proxy: Frozen,
) -> None:
    url, proxy = behind_proxy.server.url, behind_proxy.proxy
    ds, grids = _setup(url)
    warm = _requests(ds, grids, tag=0)  # open the pools' connections: queries, then the rest
    for part in (
        [r for r in warm if "/grids/" in r[1]],
        [r for r in warm if "/grids/" not in r[1]],
    ):
        assert {s for s, _ in asyncio.run(_fire(url, part))} == {200}

    frozen_requests = _requests(ds, grids, tag=1)
    proxy.freeze()
    thaw = threading.Timer(FREEZE_AT_MOST, proxy.thaw)
    thaw.start()
    try:
        during = asyncio.run(_fire(url, frozen_requests, stagger=3.0))
        later = asyncio.run(_fire(url, _requests(ds, grids, tag=2)))  # still frozen
    finally:
        thaw.cancel()
        proxy.thaw()
    slowest = max(t for _, t in during)
    print(f"frozen: slowest answer {slowest:.2f} s; later ones {max(t for _, t in later):.2f} s")
    print([(p, s, round(t, 2)) for (_, p, _), (s, t) in zip(frozen_requests, during, strict=True)])
    assert [s for s, _ in during] == [503] * len(during), during
    assert slowest < DEADLINE, during
    assert [s for s, _ in later] == [503] * len(later), later
    assert max(t for _, t in later) < 2.0, later  # known down: answered at once

    deadline = time.monotonic() + 30
    while httpx.get(f"{url}/readyz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "no recovery within 30 s of the thaw"
        time.sleep(0.2)
    # the frozen requests again: a charge committed unseen is served from its stored
    # answer (no second charge), the others are answered and charged now
    with httpx.Client(base_url=url, headers=AUTH, timeout=60) as c:
        again = [c.request(m, p, **kw) for m, p, kw in frozen_requests]
    assert [r.status_code for r in again] == [200] * len(again), [r.text for r in again]
    means = [r.json() for r in again if "query_id" in r.json()]
    accounts, entries, stored = _ledger(behind_proxy.direct_url, ds)
    assert accounts == dict(entries), "ledger entries and accounts disagree"
    assert {m["query_id"] for m in means} <= stored
    with httpx.Client(base_url=url, headers=AUTH, timeout=60) as c:
        for m, p, kw in frozen_requests:  # a third time: all stored, nothing charged
            r = c.request(m, p, **kw)
            assert r.status_code == 200 and r.json().get("cached", True), r.text
    assert _ledger(behind_proxy.direct_url, ds)[0] == accounts
    # the watch's lines, like every other, are JSON (DPGATE_LOG_FORMAT=json)
    lines = behind_proxy.server.log.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    watch = [r["message"] for r in records if r["logger"] == "dpgate.db"]
    assert any(m.startswith("the database has not answered for") for m in watch), watch
    assert any(m.startswith("the database answers again") for m in watch), watch
