"""Profile releases under concurrency: weekday profiles, single-hour releases and replays
fired at once at two server processes on one database (``budget_window: day``). Each
(bus, day) is charged in its own window, never past ``budget_per_user``; every account is
the sum of its entries; a replayed profile is charged once."""

from __future__ import annotations

import asyncio
from collections import Counter
from decimal import Decimal

import httpx
import pytest

from tests.conftest import ADMIN_KEY
from tests.helpers import make_csv
from tests.integration.test_budget_windows_concurrency import _check_windows, _ledger
from tests.integration.test_release_profiles import DATA_DATES, _rows
from tests.live_server import live_server

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
CAP = Decimal(1)


def _setup(url: str) -> int:
    rows = [r for d in DATA_DATES for h in (8, 9) for r in _rows(d, h)]
    with httpx.Client(base_url=url, headers=AUTH, timeout=60) as c:
        ds = c.post(
            "/datasets",
            json={"name": "profiles", "value_bound": 10, "budget_per_user": float(CAP),
                  "timezone": "America/Chicago", "budget_window": "day"},
        ).json()["id"]  # fmt: skip
        up = c.post(
            f"/datasets/{ds}/records", content=make_csv(rows).encode(),
            headers={"content-type": "text/csv"},
        )  # fmt: skip
        assert up.status_code == 200 and up.json()["rejected"] == 0, up.text
    return int(ds)


def _bodies() -> list[dict]:
    profile = {"from": "2016-03-12", "to": "2016-03-17", "days": "weekdays"}
    out = []
    for i in range(10):
        out.append({"slot_start": "08:00", "slots": 2, "epsilon": 0.2 + 0.001 * i,
                    "statistics": ["mean"], "min_users": 5, "profile": profile})  # fmt: skip
    for i in range(6):
        out.append({"slot_start": "2016-03-14T08:00:00", "epsilon": 0.25 + 0.001 * i,
                    "statistics": ["mean"], "min_users": 5})  # fmt: skip
    replay = dict(out[0])
    return [*out, replay, replay]


async def _fire(urls: list[str], ds: int, bodies: list[dict]) -> list:
    clients = [httpx.AsyncClient(base_url=u, headers=AUTH, timeout=120) for u in urls]
    try:
        return await asyncio.gather(
            *(
                clients[i % 2].post(f"/datasets/{ds}/releases", json=b)
                for i, b in enumerate(bodies)
            ),
            return_exceptions=True,
        )
    finally:
        for c in clients:
            await c.aclose()


@pytest.mark.slow
def test_profiles_from_two_processes_charge_each_unit_in_its_window(
    postgres_url: str, tmp_path
) -> None:
    with (
        live_server(postgres_url, tmp_path, workers=1) as one,
        live_server(postgres_url, tmp_path, workers=1) as two,
    ):
        ds = _setup(one.url)
        results = asyncio.run(_fire([one.url, two.url], ds, _bodies()))
    codes = Counter(r.status_code if isinstance(r, httpx.Response) else repr(r) for r in results)
    assert set(codes) <= {200, 403}, codes
    assert codes[200] and codes[403], codes  # the windows were spent up to the cap
    accounts, entries, _, _ = _ledger(postgres_url, ds)
    _check_windows(accounts, entries, {d for d in DATA_DATES if d.isoweekday() <= 5})
    same = (results[0], results[-2], results[-1])  # one body sent three times
    replays = [r for r in same if isinstance(r, httpx.Response) and r.status_code == 200]
    assert len({r.json()["release_id"] for r in replays}) <= 1  # one release, charged once
    charged = {ref for _, _, ref, *_ in entries}
    ok = [r.json() for r in results if isinstance(r, httpx.Response) and r.status_code == 200]
    assert len(charged) == len({a["release_id"] for a in ok})
