"""Issue 15's targets on real data: the 08:00 local slot of each shared CapMetrics day.

Each day goes into its own res-8 dataset (America/Chicago, U = 30 m/s, speeds from
``speed``, users from ``vehicle_id``) and its 08:00 slot is released at H3 resolution
7 with ``min_users`` 30, ``max_user_cost`` 2, the mean only, Clip-User on. Checked
against an independent count of the CSV: every res-7 grid with at least 30 buses is
released and every other one skipped, with exact counts; no bus is charged more
than 2 (the ledger); and, over the released grids of six releases (budget epochs) of
each day, the median |mean error| and how often ``ci95`` holds the true mean. Run with
``-s`` to see the figures for each mechanism measured.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from datetime import date
from zoneinfo import ZoneInfo

import h3
import pytest
from fastapi.testclient import TestClient

from tests.helpers import create_dataset, upload_csv
from tests.integration.ingest_support import CAPMETRICS_COLUMNS, CAPMETRICS_DAYS, capmetrics_hour

DATA = CAPMETRICS_DAYS
DAYS = ("2016-11-25", "2016-11-26", "2017-03-16")
ZONE = ZoneInfo("America/Chicago")
U = 30.0
MIN_USERS = 30
EPOCHS = 6  # releases per day, each in a new budget epoch (fresh noise)

pytestmark = pytest.mark.slow


def _truth(day: str) -> dict[str, dict]:
    """Per res-7 cell of the 08:00 local slot: buses and the mean of their records
    (first record per (bus, timestamp), values clamped to [0, U])."""
    cells: dict[str, dict] = defaultdict(lambda: {"buses": set(), "values": []})
    for bus, local, cell8, speed in capmetrics_hour(day, 8, ZONE, U):
        if local.date() != date.fromisoformat(day):
            continue
        cell = h3.cell_to_parent(cell8, 7)
        cells[cell]["buses"].add(bus)
        cells[cell]["values"].append(speed)
    return {
        c: {"n_users": len(v["buses"]), "mean": statistics.fmean(v["values"])}
        for c, v in cells.items()
    }


@pytest.fixture(scope="module")
def truths() -> dict[str, dict[str, dict]]:
    missing = [d for d in DAYS if not (DATA / f"{d}.csv").exists()]
    if missing:
        pytest.skip(f"CapMetrics days {missing} not found in {DATA.resolve()} (../shared/data)")
    return {d: _truth(d) for d in DAYS}


def _releases(client: TestClient, day: str, mechanism: str) -> list[tuple[dict, list[dict]]]:
    """``EPOCHS`` releases of the day's 08:00 slot, each in a new budget epoch, with the
    ledger of that epoch."""
    ds = create_dataset(
        client,
        name=f"capmetrics {day}",
        value_bound=U,
        h3_resolution=8,
        timeslot_minutes=60,
        timezone="America/Chicago",
        budget_per_user=10.0,
    )["id"]
    upload_csv(client, ds, (DATA / f"{day}.csv").read_bytes(), **CAPMETRICS_COLUMNS)
    body = {
        "slot_start": f"{day}T08:00:00",
        "h3_resolution": 7,
        "min_users": MIN_USERS,
        "max_user_cost": 2.0,
        "statistics": ["mean"],
        "mechanism": mechanism,
        "clip_user": True,
    }
    out = []
    for epoch in range(EPOCHS):
        if epoch:
            reset = client.post(f"/datasets/{ds}/budget/reset", json={"reason": "test epoch"})
            assert reset.status_code == 200, reset.text
        resp = client.post(f"/datasets/{ds}/releases", json=body)
        assert resp.status_code == 200, resp.text
        assert resp.json()["cached"] is False
        ledger = client.get(f"/datasets/{ds}/ledger", params={"limit": 10_000}).json()["users"]
        out.append((resp.json(), ledger))
    return out


def _figures(client: TestClient, truths: dict, mechanism: str) -> tuple[float, float, int]:
    errors, covered, widths, plans, ran = [], [], [], set(), Counter()
    for day in DAYS:
        truth = truths[day]
        busy = {c for c, t in truth.items() if t["n_users"] >= MIN_USERS}
        for out, ledger in _releases(client, day, mechanism):
            assert {g["h3_cell"] for g in out["grids"]} == busy, day
            assert out["skipped_grids"] == len(truth) - len(busy), day
            plans.add((day, out["K"], out["epsilon"], len(out["grids"]), out["skipped_grids"]))
            assert out["max_user_cost"] <= 2.0 and max(u["spent"] for u in ledger) <= 2.0
            for g in out["grids"]:
                t = truth[g["h3_cell"]]
                assert g["n_users"] == t["n_users"], (day, g["h3_cell"])
                assert g["slot_start"].startswith(f"{day}T08:00:00-0")
                mean = g["mean"]
                ran[mean["mechanism"], mean["ci95"] is not None] += 1
                errors.append(abs(mean["estimate"] - t["mean"]))
                if mean["ci95"] is None:  # no honest interval: the answer says why
                    assert mean["ci95_note"], mean
                    assert mechanism != "auto", mean  # auto's mean here always has one
                else:
                    covered.append(mean["ci95"][0] <= t["mean"] <= mean["ci95"][1])
                    widths.append(mean["ci95"][1] - mean["ci95"][0])
    median = statistics.median(errors)
    coverage = sum(covered) / len(covered) if covered else None
    print(
        f"\n{mechanism:>18}: {len(errors)} (grid, release) pairs, median |mean error| "
        f"{median:.3f} m/s, ci95 coverage {coverage}, median ci95 width "
        f"{statistics.median(widths) if widths else None}; (day, K, eps, released, skipped): "
        f"{sorted(plans)}; (mechanism, with ci95): {dict(ran)}"
    )
    return median, coverage, len(errors)


@pytest.mark.parametrize("mechanism", ["auto", "clip", "array_avg_bestfit"])
def test_capmetrics_0800_released_at_res7_within_cost(
    client: TestClient, truths: dict, mechanism: str
) -> None:
    median, coverage, pairs = _figures(client, truths, mechanism)
    assert pairs >= 3 * EPOCHS * 5
    # A published interval is honest whatever the mechanism: nominally >= 95%; with
    # about 150 pairs, 85% is about five standard deviations below it. auto's mean here is
    # user_window, whose interval bounds its clipping with probability 0.99 (docs/math.md
    # §11.6): every grid has one.
    assert coverage is not None and coverage >= 0.85, f"{mechanism}: ci95 held {coverage}"
    if mechanism == "auto":  # the target, for the default mechanism
        assert median <= 1.5, f"median |mean error| {median:.2f} m/s"
    else:  # the others are measured and printed; this only catches a release gone wrong
        assert median <= 3.0, f"median |mean error| {median:.2f} m/s"
