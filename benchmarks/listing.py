"""Grid listing pages at two dataset sizes: a page's time must not grow with the dataset
nor with its offset (``app.datasets.repository.GridRepository.page``).

Run ``python benchmarks/listing.py`` (``--grids`` default 10^4 and 10^6: a city of
5,000 res-8 cells over as many hourly slots as that takes; ``--repeats`` default 5). On
a fresh Postgres schema per size it writes the grids directly (no records: the listing
reads only ``grids``), ANALYZEs and VACUUMs them (as autovacuum would), then times, each
the median of ``--repeats``: the first page, a page at the middle and at the end of
the listing (``limit=100``), the same by ``-n_users`` and with ``min_users=5``, and one
slot's page. Prints one line per case and size, and the plan of the deepest page.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from app.datasets.models import Dataset, Grid
from app.datasets.repository import GridRepository
from app.db.migrate import upgrade
from benchmarks.postgres import PG_URL, fresh_database

CELLS = 5000
LIMIT = 100


def _fill(session: Session, n_grids: int) -> int:
    dataset = Dataset(
        name="listing", value_bound=10.0, h3_resolution=8, timeslot_minutes=60,
        timezone="UTC", budget_per_user=Decimal(1), max_epsilon_per_query=Decimal(10),
        on_exhausted="refuse",
    )  # fmt: skip
    session.add(dataset)
    session.flush()
    session.execute(
        text(
            "INSERT INTO grids (public_id, dataset_id, h3_cell, slot_start, n_users, n_records,"
            " max_user_records, version, slot_minutes)"
            " SELECT md5(g::text), :d, '88' || lpad(to_hex(g % :c), 13, '0'),"
            " timestamptz '2024-01-01 00:00+00' + (g / :c) * interval '1 hour',"
            " 1 + (g::bigint * 7919) % 40, 20, 3, 1, 0 FROM generate_series(0, :n - 1) g"
        ),
        {"d": dataset.id, "c": CELLS, "n": n_grids},
    )
    return dataset.id


def _time(session: Session, repeats: int, **page: object) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        GridRepository(session).page(**page)  # type: ignore[arg-type]
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grids", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--url", default=PG_URL)
    args = ap.parse_args()
    for n in args.grids:
        with tempfile.TemporaryDirectory() as tmp:
            url, drop = fresh_database("postgres", Path(tmp), args.url)
            try:
                upgrade(url)
                engine = create_engine(url, isolation_level="AUTOCOMMIT")
                with Session(engine) as session:
                    ds = _fill(session, n)
                    session.execute(text("VACUUM ANALYZE grids"))
                    slot = session.scalar(select(Grid.slot_start).where(Grid.dataset_id == ds))
                    base = {"dataset_id": ds, "slot_start": None, "h3_cell": None, "limit": LIMIT}
                    cases = {
                        "first page": {**base, "offset": 0},
                        "middle": {**base, "offset": n // 2},
                        "last page": {**base, "offset": n - LIMIT},
                        "-n_users, middle": {**base, "offset": n // 2, "sort": "-n_users"},
                        "min_users=5, middle": {**base, "offset": n // 3, "min_users": 5},
                        "one slot": {**base, "offset": 0, "slot_start": slot},
                    }
                    for name, page in cases.items():
                        ms = 1000 * _time(session, args.repeats, **page)
                        print(f"{n:>10,} grids  {name:22s} {ms:8.1f} ms", flush=True)
                engine.dispose()
            finally:
                drop()


if __name__ == "__main__":
    main()
