"""How a dataset's operations grow with its size: a synthetic city loaded day by day
through the real ingestion, then each operation timed at that size.

Run ``python benchmarks/growth.py --days 1 100`` (one run per size, each in a fresh
Postgres schema; ``--repeats`` default 3). The city: 2,000 buses, 500 readings each per
day (10⁶ records a day), random walks over a 40 km box (res-8 cells), days from
2024-01-01 (UTC), each day one upload of 10⁶ rows through ``POST /datasets/{id}/records``
(the app in-process). Then,
the median of ``--repeats`` each, through the HTTP API (in-process):

* ``ingest hour``: one more hour (~42,000 records, the next day's first hour);
* ``release hour``: ``POST /datasets/{id}/releases`` of one hour (a new epsilon each);
* ``listing page``: ``GET /datasets/{id}/grids?limit=100`` at the middle of the listing;
* ``query``: ``GET /grids/{id}/mean`` with a new epsilon (uncached);
* ``release GET``: ``GET /releases/{id}`` of the hour's release;
* ``drop month``: raw retention dropping the first month (the dataset's retention set
  and applied as at the end of an upload, timed alone), once;
* ``disk``: records, grids and snapshots, in MB per 10⁶ records.

Prints a table and writes it as JSON (``--out``). The load of 10⁸ records takes a long
time and ~13 GB: run it alone (``nice``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.postgres import PG_URL, fresh_database  # noqa: E402

ADMIN = "dpg_growth_benchmark_admin_key_0001"
SECRET = b"growth-benchmark-secret"
BUSES, PER_DAY = 2000, 500
START = datetime(2024, 1, 1, tzinfo=UTC)


def day_csv(day: int, hours: tuple[int, int] = (0, 24), seed: int = 11) -> bytes:
    """One day (or ``hours`` of it) of the city: 2,000 buses on random walks."""
    rng = np.random.default_rng(seed + day)
    lo, hi = hours
    n = PER_DAY * (hi - lo) // 24
    secs = np.sort(rng.integers(lo * 3600, hi * 3600, (BUSES, n)), axis=1)
    base = int((START + timedelta(days=day)).timestamp())
    lat = 30.10 + 0.4 * rng.random((BUSES, 1)) + np.cumsum(rng.normal(0, 4e-4, (BUSES, n)), 1)
    lon = -97.95 + 0.4 * rng.random((BUSES, 1)) + np.cumsum(rng.normal(0, 4e-4, (BUSES, n)), 1)
    speed = np.where(rng.random((BUSES, n)) < 0.3, 0.0, rng.uniform(0, 30, (BUSES, n)))
    bus = np.repeat(np.arange(BUSES), n)
    lines = [
        f"b{b},{base + s},{la:.6f},{lo_:.6f},{v:.2f}\n"
        for b, s, la, lo_, v in zip(
            bus.tolist(), secs.ravel().tolist(), lat.ravel().tolist(), lon.ravel().tolist(),
            speed.ravel().tolist(), strict=True,
        )
    ]  # fmt: skip
    return ("user_id,timestamp,lat,lon,value\n" + "".join(lines)).encode()


def _chunks(body: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


def _median(fn: Callable[[int], Any], repeats: int) -> float:
    runs = []
    for i in range(repeats):
        start = time.perf_counter()
        fn(i)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def run_size(url: str, days: int, repeats: int) -> dict[str, float]:
    from fastapi.testclient import TestClient
    from sqlalchemy import text

    from app.config import Settings
    from app.datasets.models import Dataset
    from app.db.engine import make_engine, make_sessionmaker
    from app.db.migrate import upgrade
    from app.main import create_app
    from app.uploads.retention import apply_retention

    upgrade(url)
    engine = make_engine(url)
    make = make_sessionmaker(engine)
    settings = Settings(database_url=url, admin_key=ADMIN, secret_key=SECRET.decode())
    out: dict[str, float] = {"records": days * BUSES * PER_DAY}
    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN}"
        ds = client.post(
            "/datasets", json={"name": "growth", "value_bound": 30, "budget_per_user": 1e6}
        ).json()["id"]
        load_start = time.perf_counter()
        for day in range(days):
            body = day_csv(day)
            r = client.post(
                f"/datasets/{ds}/records", content=body, headers={"content-type": "text/csv"}
            )
            assert r.status_code == 200, r.text
            if day % 10 == 9:
                print(f"  loaded {day + 1} days ({time.perf_counter() - load_start:.0f} s)",
                      flush=True)  # fmt: skip
        out["load_s"] = time.perf_counter() - load_start
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))  # as autovacuum would after a load

        def ingest(i: int) -> None:
            body = day_csv(days + i, hours=(0, 1))
            r = client.post(
                f"/datasets/{ds}/records", content=body, headers={"content-type": "text/csv"}
            )
            assert r.status_code == 200, r.text

        out["ingest hour"] = _median(ingest, repeats)
        hour = (START + timedelta(days=days - 1, hours=12)).isoformat()
        releases: list[str] = []

        def release(i: int) -> None:
            body = {"slot_start": hour, "epsilon": 0.01 + 0.001 * i, "min_users": 5}
            r = client.post(f"/datasets/{ds}/releases", json=body)
            assert r.status_code == 200, r.text
            releases.append(r.json()["release_id"])

        out["release hour"] = _median(release, repeats)
        n_grids = int(client.get(f"/datasets/{ds}").json()["n_grids"])
        out["grids"] = n_grids
        listing = f"/datasets/{ds}/grids?limit=100&offset={min(n_grids // 2, 10**6)}"
        out["listing page"] = _median(lambda i: client.get(listing).raise_for_status(), repeats)
        grid = client.get(listing).json()["grids"][0]["grid_id"]
        out["query"] = _median(
            lambda i: client.get(f"/grids/{grid}/mean?epsilon={0.01 + 0.001 * i}")
            .raise_for_status(),
            repeats,
        )  # fmt: skip
        out["release GET"] = _median(
            lambda i: client.get(f"/releases/{releases[0]}").raise_for_status(), repeats
        )
        with engine.connect() as conn:
            sizes = conn.execute(
                text(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
                    "AND (c.relname LIKE 'records_d%' OR c.relname IN ('grids', 'grid_snapshots'))"
                )
            ).scalar_one()
        out["disk MB per 1e6"] = float(sizes) / 1e6 / (out["records"] / 1e6)
        with make.begin() as session:
            dataset = session.get(Dataset, ds)
            assert dataset is not None
            dataset.raw_retention_days = 1
            session.flush()
            first_month_end = datetime(START.year, START.month + 1, 1, tzinfo=UTC)
            start = time.perf_counter()
            dropped = apply_retention(session, dataset, now=first_month_end + timedelta(days=1))
            out["drop month"] = time.perf_counter() - start
            out["months dropped"] = dropped
    engine.dispose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, nargs="+", default=[1, 100])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--url", default=PG_URL)
    ap.add_argument("--out", type=Path, default=Path("growth.json"))
    args = ap.parse_args()
    results = {}
    for days in args.days:
        print(f"{days} day(s), {days * BUSES * PER_DAY:,} records", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            url, drop = fresh_database("postgres", Path(tmp), args.url)
            try:
                results[days] = run_size(url, days, args.repeats)
            finally:
                drop()
        print(json.dumps(results[days], indent=1), flush=True)
        args.out.write_text(json.dumps(results, indent=1))
    keys = ["ingest hour", "release hour", "listing page", "query", "release GET", "drop month",
            "disk MB per 1e6"]  # fmt: skip
    first = results[args.days[0]]
    for days in args.days:
        row = results[days]
        cells = "  ".join(f"{k} {row[k]:.3f} ({row[k] / first[k]:.2f}×)" for k in keys)
        print(f"{row['records']:>12,} records: {cells}")


if __name__ == "__main__":
    main()
