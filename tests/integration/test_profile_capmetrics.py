"""A typical weekday 08:00 on real CapMetrics days: the two March 2015 weekdays and the
weekdays of the four days in a row (2016-11-24 to 27), pooled in one res-8 dataset with a
day budget window, released adaptively (res 8 to 5) within 2 per bus-day.

Checked against an independent reading of the CSVs: every released cell's units are the
distinct (bus, date) pairs of its records, its true mean is their records' mean; no
bus-day is charged more than 2 in its own window (the ledger); the preview's useful share
equals the release's; run with ``-s`` for the figures.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import date
from zoneinfo import ZoneInfo

import h3
import pytest
from fastapi.testclient import TestClient

from tests.helpers import create_dataset, upload_csv
from tests.integration.ingest_support import CAPMETRICS_COLUMNS, CAPMETRICS_DAYS, capmetrics_hour

DATA = CAPMETRICS_DAYS
DAYS = ("2015-03-18", "2015-03-19", "2016-11-24", "2016-11-25", "2016-11-26", "2016-11-27")
ZONE = ZoneInfo("America/Chicago")
U = 30.0

pytestmark = pytest.mark.slow


def _records(day: str) -> list[tuple[str, date, str, float]]:
    """(bus, local date, res-8 cell, speed) of the day's 08:00 local records."""
    return [
        (bus, local.date(), cell, v) for bus, local, cell, v in capmetrics_hour(day, 8, ZONE, U)
    ]


@pytest.fixture(scope="module")
def days() -> list[str]:
    missing = [d for d in DAYS if not (DATA / f"{d}.csv").exists()]
    if missing:
        pytest.skip(f"CapMetrics days {missing} not found in {DATA.resolve()} (../shared/data)")
    return list(DAYS)


@pytest.mark.parametrize(
    ("date_from", "date_to"), [("2015-03-16", "2015-03-20"), ("2016-11-21", "2016-11-27")]
)
def test_a_weekday_profile_on_real_days(
    client: TestClient, days: list[str], date_from: str, date_to: str
) -> None:
    ds = create_dataset(
        client, name="capmetrics profile", value_bound=U, h3_resolution=8, timeslot_minutes=60,
        timezone="America/Chicago", budget_per_user=2.0, budget_window="day",
    )["id"]  # fmt: skip
    records = []
    for day in days:
        upload_csv(client, ds, (DATA / f"{day}.csv").read_bytes(), **CAPMETRICS_COLUMNS)
        records += _records(day)
    first, last = date.fromisoformat(date_from), date.fromisoformat(date_to)
    chosen = [r for r in records if first <= r[1] <= last and r[1].isoweekday() <= 5]
    body = {
        "slot_start": "08:00",
        "max_user_cost": 2.0,
        "min_users": 10,
        "statistics": ["mean"],
        "partition": "adaptive",
        "coarsest_resolution": 5,
        "profile": {"from": date_from, "to": date_to, "days": "weekdays"},
    }
    preview = client.post(f"/datasets/{ds}/releases/preview", json=body)
    assert preview.status_code == 200, preview.text
    resp = client.post(f"/datasets/{ds}/releases", json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["useful"] == preview.json()["useful"]
    assert out["profile"]["n_days"] == 5
    # the truth of each released cell: its records over the chosen dates
    by_cell: dict[str, dict] = defaultdict(lambda: {"units": set(), "values": []})
    released = {g["h3_cell"]: h3.get_resolution(g["h3_cell"]) for g in out["grids"]}
    for bus, day, cell, speed in chosen:
        for res in range(8, 4, -1):
            parent = h3.cell_to_parent(cell, res)
            if released.get(parent) == res:
                by_cell[parent]["units"].add((bus, day))
                by_cell[parent]["values"].append(speed)
                break
    held, widths, fine = [], [], 0
    for g in out["grids"]:
        truth = by_cell[g["h3_cell"]]
        assert g["slot_start"] == "08:00" and g["n_users"] == len(truth["units"]) >= 10
        true_mean = statistics.fmean(truth["values"])
        assert g["mean"]["ci95"] is not None, g  # auto's mean always has one
        lo, hi = g["mean"]["ci95"]
        held.append(lo <= true_mean <= hi)
        widths.append(hi - lo)
        fine += len(truth["values"]) if g["h3_resolution"] >= 7 else 0
    covered = sum(len(v["values"]) for v in by_cell.values())
    assert covered == pytest.approx(out["coverage"]["records"] * len(chosen))
    for window in {d for _, d, _, _ in chosen}:
        users = client.get(
            f"/datasets/{ds}/ledger", params={"window": window.isoformat(), "limit": 10_000}
        ).json()["users"]
        assert all(u["spent"] <= 2.0 for u in users), window
    print(
        f"\n{date_from}..{date_to} weekdays 08:00: {len(out['grids'])} cells, coverage "
        f"{out['coverage']['records']:.2f}, useful {out['useful']['records']:.2f}, res>=7 share "
        f"{fine / covered if covered else 0:.2f}, ci95 held {sum(held)}/{len(held)}, median "
        f"width {statistics.median(widths) if widths else None}, warnings {out['warnings']}"
    )
