"""The ledger's statements for one day's release: create, lock, read and charge the
accounts of many users in one budget window (issue 25: a day charges ~50,000 buses).

Run ``python benchmarks/ledger_accounts.py`` (``--users`` default 50,000; ``--repeats``
default 5). On a fresh Postgres schema, each repeat runs in one transaction (rolled back):
``missing_accounts``, ``insert_accounts``, ``lock_accounts``, ``spent`` and ``charge`` of
``app.ledger.repository`` for every user; prints the median seconds of each and in all.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import date
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from app.datasets.models import Dataset
from app.db.migrate import upgrade
from app.ledger.repository import LedgerRepository
from benchmarks.postgres import PG_URL, fresh_database

WINDOW = date(1, 1, 1)
STEPS = ("missing_accounts", "insert_accounts", "lock_accounts", "spent", "charge")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--url", default=PG_URL)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url, drop = fresh_database("postgres", Path(tmp), args.url)
        try:
            upgrade(url)
            engine = create_engine(url)
            with Session(engine) as session, session.begin():
                dataset = Dataset(
                    name="ledger", value_bound=10.0, h3_resolution=8, timeslot_minutes=60,
                    timezone="UTC", budget_per_user=Decimal(1), max_epsilon_per_query=Decimal(10),
                    on_exhausted="refuse",
                )  # fmt: skip
                session.add(dataset)
                session.flush()
                ds = dataset.id
                users = (
                    session.execute(
                        text(
                            "INSERT INTO dataset_users (dataset_id, user_hash) "
                            "SELECT :d, md5(g::text) FROM generate_series(1, :n) g RETURNING id"
                        ),
                        {"d": ds, "n": args.users},
                    )
                    .scalars()
                    .all()
                )
            times: dict[str, list[float]] = {s: [] for s in STEPS}
            for _ in range(args.repeats):
                with Session(engine) as session:
                    repo = LedgerRepository(session)
                    for step in STEPS:
                        start = time.perf_counter()
                        if step == "missing_accounts":
                            repo.missing_accounts(ds, 1, users, window=WINDOW)
                        elif step == "insert_accounts":
                            repo.insert_accounts(ds, 1, users, window=WINDOW)
                        elif step == "lock_accounts":
                            repo.lock_accounts(ds, 1, users, window=WINDOW)
                        elif step == "spent":
                            repo.spent(ds, 1, users, window=WINDOW)
                        else:
                            repo.charge(ds, 1, users, Decimal("0.1"), window=WINDOW)
                        times[step].append(time.perf_counter() - start)
                    session.rollback()
            engine.dispose()
        finally:
            drop()
    medians = {s: statistics.median(t) for s, t in times.items()}
    for step, m in medians.items():
        print(f"{step:17s} {m:7.3f} s")
    total = sum(medians.values())
    print(f"{'all':17s} {total:7.3f} s  ({args.users:,} users, {args.repeats} repeats)")


if __name__ == "__main__":
    main()
