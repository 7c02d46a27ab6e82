"""The ledger's statements for one day's release: create, lock, read and charge the
accounts of many users in one budget window (issue 25: a day charges ~50,000 buses).

Run ``python benchmarks/ledger_accounts.py`` (``--users`` default 50,000; ``--repeats``
default 5; ``--windows`` default 1). On a fresh Postgres schema, each repeat (its
accounts in a new epoch) times ``app.ledger.service``'s set statements for every user
in each window, each step one transaction: ``new`` (a release's ledger work where no
account exists yet: ``lock_accounts``, then ``charge_accounts``, one to three grids
each), ``lock`` (the same accounts again, existing now), ``charge`` (lock and charge
them again: a later release of the same window) and ``read`` (``read_accounts``, a
preview's read); prints the median seconds of each.
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

import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from app.datasets.models import Dataset
from app.db.migrate import upgrade
from app.keys.models import ApiKey
from app.ledger import service as ledger
from app.ledger.accounts import USER_BITS
from benchmarks.postgres import PG_URL, fresh_database

WINDOW = date(1, 1, 1)
STEPS = ("new", "lock", "charge", "read")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--windows", type=int, default=1)
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
                admin = ApiKey(name="bench", role="admin", key_hash="0" * 64, prefix="bench")
                session.add_all([dataset, admin])
                session.flush()
                ds, key = dataset.id, admin.id
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
            windows = tuple(date(2024, 3, 1 + d) for d in range(args.windows))
            users_arr = np.array(sorted(users), dtype=np.int64)
            subjects = np.concatenate([(i << USER_BITS) | users_arr for i in range(args.windows)])
            grids = 1 + subjects % 3
            for epoch in range(1, args.repeats + 1):
                for step in STEPS:
                    with Session(engine) as session:
                        start = time.perf_counter()
                        dataset = session.get(Dataset, ds)
                        assert dataset is not None
                        if step == "read":
                            ledger.read_accounts(session, dataset, epoch, windows, subjects)
                        else:
                            accounts = ledger.lock_accounts(
                                session, dataset, epoch, windows, subjects
                            )
                        if step in ("new", "charge"):
                            ledger.charge_accounts(
                                session, accounts, subjects, grids, Decimal("0.01"),
                                key_id=key, reference_id=epoch,
                            )  # fmt: skip
                        session.commit()
                        times[step].append(time.perf_counter() - start)
            engine.dispose()
        finally:
            drop()
    print(f"{args.users:,} users x {args.windows} window(s), median of {args.repeats}:")
    for step, t in times.items():
        print(f"{step:7s} {statistics.median(t):7.3f} s")
    print("(new and charge include their lock; the others find the accounts new made)")


if __name__ == "__main__":
    main()
