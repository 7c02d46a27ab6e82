"""The ledger never overspends: many concurrent requests, several server processes,
real Postgres, and a ``kill -9`` in the middle (issue 5)."""

from __future__ import annotations

import asyncio
from collections import Counter
from decimal import Decimal

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import CELL_A, CELL_B
from tests.live_server import flood_and_kill, live_server, seed_grids, start_server

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
# counts 1, 50, 100, 200, 250 so that clip's m can take 200 distinct values
GRID_A = {f"a{i}": [1.0 + (j % 7) for j in range(c)] for i, c in enumerate((1, 50, 100, 200, 250))}


def _setup(url: str, grids: dict, budget: float = 1.0) -> tuple[int, list[str]]:
    return seed_grids(url, ADMIN_KEY, "concurrency", budget, grids)


async def _fire(url: str, requests: list[tuple[str, dict]]) -> list[httpx.Response | Exception]:
    limits = httpx.Limits(max_connections=200)
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120, limits=limits) as c:
        return await asyncio.gather(
            *(c.get(path, params=params) for path, params in requests), return_exceptions=True
        )


def _spent(db_url: str, ds: int) -> dict[int, Decimal]:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("select user_id, spent from budget_accounts where dataset_id = :d"), {"d": ds}
        ).all()
        ledger = conn.execute(
            text("select epsilon, users from ledger_entries where dataset_id = :d"), {"d": ds}
        ).all()
    engine.dispose()
    from_entries: Counter = Counter()
    for eps, users in ledger:
        for u in users:
            from_entries[u] += Decimal(eps)
    spent = {u: Decimal(s) for u, s in rows}
    assert {u: s for u, s in spent.items() if s} == dict(from_entries), "ledger != accounts"
    return spent


@pytest.mark.slow
def test_200_concurrent_queries_one_grid_four_workers(postgres_url: str, tmp_path) -> None:
    with live_server(postgres_url, tmp_path, workers=4) as server:
        ds, grid_ids = _setup(server.url, {CELL_A: GRID_A})
        (grid,) = grid_ids
        reqs = [
            (f"/grids/{grid}/mean", {"epsilon": 0.1, "mechanism": "clip", "m": m})
            for m in range(1, 201)
        ]
        results = asyncio.run(_fire(server.url, reqs))
    codes = Counter(r.status_code if isinstance(r, httpx.Response) else repr(r) for r in results)
    assert codes == {200: 10, 403: 190}, codes
    assert all(
        r.json()["error"]["code"] == "budget_exhausted" for r in results if r.status_code == 403
    )
    spent = _spent(postgres_url, ds)
    assert sorted(spent.values()) == [Decimal("1.000000000000")] * 5


@pytest.mark.slow
def test_concurrent_queries_on_two_grids_sharing_users(postgres_url: str, tmp_path) -> None:
    shared = {"s1": [1.0] * 3, "s2": [2.0] * 4}
    grids = {CELL_A: {**shared, "a1": [3.0] * 5}, CELL_B: {**shared, "b1": [4.0] * 6}}
    with live_server(postgres_url, tmp_path, workers=4) as server:
        ds, grid_ids = _setup(server.url, grids)
        reqs = []
        for i in range(200):
            grid = grid_ids[i % 2]
            stat = ("mean", "variance")[(i // 2) % 2]
            reqs.append(
                (f"/grids/{grid}/{stat}", {"epsilon": 0.1 + 1e-6 * i, "mechanism": "baseline"})
            )
        results = asyncio.run(_fire(server.url, reqs))
    codes = Counter(r.status_code if isinstance(r, httpx.Response) else repr(r) for r in results)
    assert set(codes) <= {200, 403} and codes[200] >= 1, codes
    spent = _spent(postgres_url, ds)
    assert max(spent.values()) <= Decimal(1)
    ok = [r.json() for r in results if r.status_code == 200]
    total = sum(Decimal(str(r["epsilon"])) for r in ok)
    # every answer charges both shared users, so they hold the whole total
    assert sorted(spent.values())[-2:] == [total, total]
    # every refusal was forced: spend only grows, so at the end each refused query
    # still does not fit next to the shared users' total
    refused = [
        Decimal(str(p["epsilon"]))
        for (_, p), r in zip(reqs, results, strict=True)
        if r.status_code == 403
    ]
    assert refused and all(total + e > Decimal(1) for e in refused)


@pytest.mark.slow
def test_kill_9_mid_flight_loses_no_charge(postgres_url: str, tmp_path) -> None:
    server = start_server(postgres_url, tmp_path, workers=2)
    try:
        ds, grid_ids = _setup(server.url, {CELL_A: GRID_A}, budget=100.0)
        (grid,) = grid_ids

        async def flood() -> dict[int, httpx.Response]:
            async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as c:
                params = {"epsilon": 0.05, "mechanism": "clip"}
                answered, _ = await flood_and_kill(
                    lambda i: c.get(f"/grids/{grid}/mean", params={**params, "m": i + 1}),
                    250,
                    server.kill_hard,
                    after=20,
                )
            return answered

        received = [r.json() for r in asyncio.run(flood()).values()]
    finally:
        server.kill_hard()
    assert received, "no answer arrived before the kill"
    with live_server(postgres_url, tmp_path, workers=1) as again:
        assert httpx.get(f"{again.url}/healthz").status_code == 200
    engine = create_engine(postgres_url)
    with engine.connect() as conn:
        stored = set(
            conn.execute(
                text(
                    "select q.public_id from query_answers q join ledger_entries e "
                    "on e.kind = 'query' and e.reference_id = q.id where q.dataset_id = :d"
                ),
                {"d": ds},
            ).scalars()
        )
    engine.dispose()
    assert {r["query_id"] for r in received} <= stored
    spent = _spent(postgres_url, ds)
    assert max(spent.values()) <= Decimal(100)
    assert max(spent.values()) == Decimal("0.05") * len(stored)
