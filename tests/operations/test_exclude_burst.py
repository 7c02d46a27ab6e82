"""A burst on an ``on_exhausted: exclude`` dataset (issue 26): users run out of budget
group after group while hundreds of queries are in flight, so many commits find a user
newly exhausted. No request may answer 503 for that (it did: "the ledger is busy with
this grid; retry"); each is answered or refused for budget, and nobody passes the cap."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR
from tests.live_server import live_server

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
#: six grids (two cells, three hours); one user per set of grids it is in (63 sets), so
#: each grid holds 32 users charged at 32 different paces, who run out one after another
GRIDS = [(cell, hour) for cell in (CELL_A, CELL_B) for hour in range(3)]
CAP = 1.0


def _csv() -> str:
    lines = ["user_id,timestamp,lat,lon,value"]
    for pattern in range(1, 2 ** len(GRIDS)):
        for g, ((lat, lon), hour) in enumerate(GRIDS):
            if pattern >> g & 1:
                for r in range(2):
                    ts = HOUR + timedelta(hours=hour, seconds=1000 * (g % 2) + 10 * pattern + r)
                    lines.append(f"u{pattern},{ts.isoformat()},{lat},{lon},{1 + (pattern + r) % 9}")
    return "\n".join(lines) + "\n"


def _setup(url: str) -> tuple[int, list[str]]:
    with httpx.Client(base_url=url, headers=AUTH, timeout=60) as c:
        body = {"name": "burst", "value_bound": 10, "budget_per_user": CAP}
        ds = c.post("/datasets", json={**body, "on_exhausted": "exclude"}).json()["id"]
        up = c.post(
            f"/datasets/{ds}/records",
            content=_csv().encode(),
            headers={"content-type": "text/csv"},
        )
        assert up.status_code == 200, up.text
        grids = [g["grid_id"] for g in c.get(f"/datasets/{ds}/grids").json()["grids"]]
    assert len(grids) == len(GRIDS)
    return ds, grids


async def _burst(url: str, grids: list[str], n: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=300, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120, limits=limits) as c:
        return await asyncio.gather(
            *(
                c.get(
                    f"/grids/{grids[i % len(grids)]}/mean",
                    # 0.01 to 0.2: a user out of budget for one query is not for another
                    params={"epsilon": 0.01 + (i * 37 % 191) / 1000, "mechanism": "baseline"},
                )
                for i in range(n)
            )
        )


@pytest.mark.slow
def test_an_exclude_burst_never_answers_503(postgres_url: str, tmp_path: Path) -> None:
    with live_server(postgres_url, tmp_path, workers=2) as server:
        ds, grids = _setup(server.url)
        results = asyncio.run(_burst(server.url, grids, 600))
    codes = Counter(r.status_code for r in results)
    assert set(codes) <= {200, 403}, {r.text for r in results if r.status_code >= 500}
    assert all(
        r.json()["error"]["code"] == "budget_exhausted" for r in results if r.status_code == 403
    )
    engine = create_engine(postgres_url)
    with engine.connect() as conn:
        spent = conn.execute(
            text("select spent from budget_accounts where dataset_id = :d"), {"d": ds}
        ).scalars()
        assert max(Decimal(s) for s in spent) <= Decimal(str(CAP))
    engine.dispose()
    assert codes[200] >= 20, codes  # the grids answered until their users ran out
