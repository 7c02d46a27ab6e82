"""A city's published hour on the shared CapMetrics days: fixed resolutions against the
adaptive partition (issue 23's targets).

Run ``python benchmarks/city_release.py`` (options ``--hours 8 17``, ``--releases 3``,
``--url``). Each day goes into its own res-8 dataset (America/Chicago, U = 30 m/s) on a
fresh schema of the Postgres server; each hour is released ``--releases`` times (a
budget reset between) with ``min_users`` 10, ``max_user_cost`` 2, the mean only, as

* ``fixed r8`` / ``fixed r7`` / ``fixed r6``: one resolution (auto, its default objective);
* ``adaptive``: ``partition: adaptive``, ``coarsest_resolution`` 5 (auto; objective
  interval, the adaptive default).

Against an independent count of the CSV (first record per bus and timestamp, values
clamped to [0, U]) it prints, per day, hour and configuration: the share of the hour's
records in released cells (``covered``), in released cells whose ``ci95`` is at most
6 m/s wide and holds the true mean (``useful``), of the covered records in cells of
resolution 7 or finer (``fine``), how often ``ci95`` holds the truth (``holds``), the
median |error|, and the time of one release. It checks, and fails loudly otherwise, that
released cells are disjoint, each has at least ``min_users`` buses by that count, and no
bus is charged more than 2 in the ledger.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import h3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from benchmarks.ingest import COLUMNS  # noqa: E402
from benchmarks.postgres import PG_URL, fresh_database  # noqa: E402

DATA = ROOT / "../shared/data/capmetrics"
DAYS = ("2016-11-25", "2016-11-26", "2017-03-16")
ZONE = ZoneInfo("America/Chicago")
ADMIN = "dpg_city_release_benchmark_admin"
U, MIN_USERS, COST, USEFUL = 30.0, 10, 2.0, 6.0
CONFIGS: dict[str, dict[str, Any]] = {
    "fixed r8": {},
    "fixed r7": {"h3_resolution": 7},
    "fixed r6": {"h3_resolution": 6},
    "adaptive": {"partition": "adaptive", "coarsest_resolution": 5},
}


def hour_rows(day: str, hour: int) -> list[tuple[str, str, float]]:
    """``(bus, res-8 cell, clamped speed)`` of the local hour's records."""
    seen: set[tuple[str, str]] = set()
    rows = []
    with (DATA / f"{day}.csv").open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            key = (row["vehicle_id"], row["timestamp"])
            if key in seen:
                continue
            seen.add(key)
            local = datetime.fromisoformat(row["timestamp"]).astimezone(ZONE)
            if local.date() != date.fromisoformat(day) or local.hour != hour:
                continue
            lat, lon = float(row["latitude"]), float(row["longitude"])
            cell = h3.latlng_to_cell(lat, lon, 8)
            rows.append((row["vehicle_id"], cell, min(max(float(row["speed"]), 0.0), U)))
    return rows


def score(
    rows: list[tuple[str, str, float]], out: dict[str, Any], statistic: str = "mean"
) -> dict[str, float]:
    """The figures of one release against the independent count (and its checks): of the
    ``mean`` (every record's), or of the ``user_mean`` (each unit's mean, averaged)."""
    released = {g["h3_cell"]: g for g in out["grids"]}
    members: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for bus, fine, value in rows:
        homes = [c for r in range(5, 9) if (c := h3.cell_to_parent(fine, r)) in released]
        if len(homes) > 1:
            raise AssertionError(f"released cells overlap: {homes}")
        if homes:
            members[homes[0]].append((bus, value))
    useful = fine = 0
    holds, errors = [], []
    for cell, grid in released.items():
        buses = {b for b, _ in members[cell]}
        if len(buses) < MIN_USERS or len(buses) != grid["n_users"]:
            raise AssertionError(f"{cell}: {len(buses)} buses, answer says {grid['n_users']}")
        truth = statistics.fmean(v for _, v in members[cell])
        if statistic == "user_mean":
            per: dict[str, list[float]] = defaultdict(list)
            for bus, v in members[cell]:
                per[bus].append(v)
            truth = statistics.fmean(statistics.fmean(vs) for vs in per.values())
        mean = grid[statistic]
        errors.append(abs(mean["estimate"] - truth))
        ci = mean["ci95"]
        ok = ci is not None and ci[0] <= truth <= ci[1]
        holds.append(ok)
        if ok and ci[1] - ci[0] <= USEFUL:
            useful += len(members[cell])
        if h3.get_resolution(cell) >= 7:
            fine += len(members[cell])
    covered = sum(len(m) for m in members.values())
    return {
        "covered": covered / len(rows),
        "useful": useful / len(rows),
        "fine": fine / covered if covered else 0.0,
        "holds": sum(holds) / len(holds) if holds else float("nan"),
        "error": statistics.median(errors) if errors else float("nan"),
        "grids": len(released),
    }


def run_day(client: TestClient, day: str, hours: list[int], releases: int) -> None:
    ds = client.post(
        "/datasets",
        json={
            "name": f"capmetrics {day}",
            "value_bound": U,
            "timezone": "America/Chicago",
            "budget_per_user": 10.0,
        },
    ).json()["id"]
    resp = client.post(
        f"/datasets/{ds}/records",
        content=(DATA / f"{day}.csv").read_bytes(),
        params=COLUMNS,
        headers={"Content-Type": "text/csv"},
    )
    resp.raise_for_status()
    for hour in hours:
        rows = hour_rows(day, hour)
        if not rows:
            print(f"{day} {hour:02d}:00  no records")
            continue
        for name, extra in CONFIGS.items():
            body = {
                "slot_start": f"{day}T{hour:02d}:00:00",
                "min_users": MIN_USERS,
                "max_user_cost": COST,
                "statistics": ["mean"],
                **extra,
            }
            figures, seconds = [], []
            for _ in range(releases):
                reset = client.post(f"/datasets/{ds}/budget/reset", json={"reason": "bench"})
                reset.raise_for_status()
                start = time.perf_counter()
                resp = client.post(f"/datasets/{ds}/releases", json=body)
                seconds.append(time.perf_counter() - start)
                if resp.status_code == 404:
                    break
                resp.raise_for_status()
                ledger = client.get(f"/datasets/{ds}/ledger", params={"limit": 10_000})
                spent = max((u["spent"] for u in ledger.json()["users"]), default=0.0)
                if spent > COST:
                    raise AssertionError(f"a bus was charged {spent} > {COST}")
                figures.append(score(rows, resp.json()))
            if not figures:
                print(f"{day} {hour:02d}:00  {name:<9} nothing to release")
                continue
            mean = {k: statistics.fmean(f[k] for f in figures) for k in figures[0]}
            print(
                f"{day} {hour:02d}:00  {name:<9} grids {mean['grids']:5.1f}  covered "
                f"{mean['covered']:.2f}  useful {mean['useful']:.2f}  fine {mean['fine']:.2f}"
                f"  holds {mean['holds']:.2f}  |error| {mean['error']:.2f} m/s  "
                f"{statistics.median(seconds):.2f} s",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=int, nargs="+", default=[8, 17])
    parser.add_argument("--releases", type=int, default=3)
    parser.add_argument("--days", nargs="+", default=list(DAYS))
    parser.add_argument("--url", default=PG_URL)
    args = parser.parse_args()
    missing = [d for d in args.days if not (DATA / f"{d}.csv").exists()]
    if missing:
        sys.exit(f"CapMetrics days {missing} not found in {DATA.resolve()}")
    with tempfile.TemporaryDirectory() as tmp:
        url, drop = fresh_database("postgres", Path(tmp), args.url)
        try:
            upgrade(url)
            settings = Settings(database_url=url, admin_key=ADMIN, secret_key="bench-secret")
            with TestClient(create_app(settings)) as client:
                client.headers["Authorization"] = f"Bearer {ADMIN}"
                for day in args.days:
                    run_day(client, day, args.hours, args.releases)
        finally:
            drop()


if __name__ == "__main__":
    main()
