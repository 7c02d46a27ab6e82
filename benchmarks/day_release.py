"""A whole day of the synthetic city released in one call (issue 25: ``slots: 24``).

Run ``python benchmarks/day_release.py`` (options ``--records`` per hour, default 10^6;
``--repeats``; ``--url``). It uploads 24 hours of ``benchmarks/release.py``'s city (the
same buses every hour) through the HTTP API on a fresh Postgres schema, then times,
through HTTP, the release of the whole day (mean and variance, Clip-User, every grid,
each user charged in the ledger) at a per-grid ``epsilon`` and within a
``max_user_cost``, each a new release per run. Prints the medians. Target (issue 25):
<= 20 s on 2 cores at 10^6 records per hour.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from benchmarks.ingest import PG_URL, fresh_database  # noqa: E402
from benchmarks.release import ADMIN, city_csv, post  # noqa: E402

DAY = "2024-03-05"


def day_csv(records_per_hour: int) -> list[bytes]:
    """24 hourly uploads of the city (its 08:00 hour moved to each hour of the day)."""
    hour = city_csv(records_per_hour)
    return [hour.replace(b"T08:", f"T{h:02d}:".encode()) for h in range(24)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per hour")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--url", default=PG_URL)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url, drop = fresh_database("postgres", Path(tmp), args.url)
        try:
            upgrade(url)
            settings = Settings(database_url=url, admin_key=ADMIN, secret_key="bench-secret")
            with TestClient(create_app(settings)) as client:
                client.headers["Authorization"] = f"Bearer {ADMIN}"
                ds = client.post(
                    "/datasets", json={"name": "day", "value_bound": 30.0, "budget_per_user": 1e6}
                ).json()["id"]
                started = time.perf_counter()
                for body in day_csv(args.records):
                    resp = client.post(
                        f"/datasets/{ds}/records",
                        content=body,
                        headers={"Content-Type": "text/csv"},
                    )
                    resp.raise_for_status()
                print(
                    f"uploaded 24 × {args.records:,} records in "
                    f"{time.perf_counter() - started:.0f} s",
                    flush=True,
                )
                base = {"slot_start": f"{DAY}T00:00:00+00:00", "slots": 24, "min_users": 1}
                for name, extra in (
                    ("epsilon", lambda i: {"epsilon": 0.1 + i * 1e-6}),
                    ("max_user_cost", lambda i: {"max_user_cost": 4.0 + i * 1e-6}),
                ):
                    times = []
                    for i in range(args.repeats):
                        t0 = time.perf_counter()
                        out = post(client, f"/datasets/{ds}/releases", {**base, **extra(i)})
                        times.append(time.perf_counter() - t0)
                        print(
                            f"  day release ({name}) run {i + 1}: {times[-1]:.1f} s, "
                            f"{len(out['grids']):,} grids, K {out['K']}",
                            flush=True,
                        )
                    print(f"day release ({name}): median {statistics.median(times):.1f} s")
        finally:
            drop()


if __name__ == "__main__":
    main()
