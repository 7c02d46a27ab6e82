"""Storing and reading one stored release, before and after migrations 0011 and 0012.

Run ``python benchmarks/release_store.py --schema NAME`` on a schema kept by
``benchmarks/day_release.py --schema NAME`` (with a day release stored in it). Its
newest release is written and read in a scratch schema, ``--repeats``
times each way:

* before: ``answer`` and ``kept`` as ``json`` columns (the engine's JSON serialiser,
  text), read back through the driver's JSON loader; the listing casts the answer to
  ``jsonb`` (a day release's is over jsonb's limit: the listing fails);
* after: ``SlotRelease.store`` (a JSON head, the grids as orjson bytes and the kept sets
  as columns (migration 0012) in ``bytea``, lz4 where the server has it), read back as a
  binary result with ``SlotRelease.answer``, the collector paused; the listing casts the
  head.

Prints the medians of wall time, this process's CPU and the Postgres backend's CPU
(from ``/proc``, so the server must run on this machine): CPU figures hold on a busy one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import JSON, Column, Integer, LargeBinary, MetaData, Table, cast, func, text  # noqa: E402
from sqlalchemy.dialects.postgresql import JSONB  # noqa: E402
from sqlalchemy.engine import Connection  # noqa: E402
from sqlalchemy.exc import DBAPIError  # noqa: E402

from app.db.engine import make_engine  # noqa: E402
from app.gc_pause import gc_paused  # noqa: E402
from app.releases.kept_sets import KeptSets  # noqa: E402
from app.releases.models import SlotRelease  # noqa: E402
from benchmarks.postgres import PG_URL, cpu_seconds, schema_url  # noqa: E402

SCRATCH = "release_store_bench"
meta = MetaData()
OLD = Table("old_releases", meta, Column("id", Integer, primary_key=True),
            Column("answer", JSON), Column("kept", JSON))  # fmt: skip
NEW = Table("new_releases", meta, Column("id", Integer, primary_key=True),
            Column("head", JSON), Column("n_grids", Integer), Column("grids", LargeBinary),
            Column("kept", LargeBinary))  # fmt: skip


def newest_release(url: str) -> tuple[dict[str, Any], KeptSets]:
    """The answer and kept sets of the schema's newest release."""
    engine = make_engine(url)
    with engine.connect() as conn:
        newest = "FROM slot_releases ORDER BY created_at DESC LIMIT 1"
        row = conn.execute(text(f"SELECT head, grids, kept {newest}")).one()
        answer = SlotRelease(head=row.head, grids=row.grids).answer()
    engine.dispose()
    return answer, KeptSets.from_bytes(row.kept)


def backend_cpu(conn: Connection) -> float:
    return cpu_seconds(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def timed(conn: Connection, step: Callable[[], object]) -> tuple[float, float, float]:
    server, cpu, wall = backend_cpu(conn), time.process_time(), time.perf_counter()
    step()
    conn.commit()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, backend_cpu(conn) - server


def steps(conn: Connection, answer: dict, kept: KeptSets) -> dict[str, Callable[[], object]]:
    def store_old() -> None:
        conn.execute(OLD.insert().values(id=2, answer=answer, kept=kept.as_json()))
        conn.execute(OLD.delete().where(OLD.c.id == 2))
        conn.commit()

    def store_new() -> None:
        record = SlotRelease()
        record.store(answer, kept)
        row = {c: getattr(record, c) for c in ("head", "n_grids", "grids", "kept")}
        conn.execute(NEW.insert().values(id=2, **row))
        conn.execute(NEW.delete().where(NEW.c.id == 2))
        conn.commit()

    def read_old() -> dict:
        return conn.execute(OLD.select()).one().answer

    def read_new() -> dict:  # as ReleaseRepository.with_grids and GET /releases/{id} do
        head = conn.execute(NEW.select().with_only_columns(NEW.c.head)).scalar_one()
        driver = conn.connection.driver_connection
        assert driver is not None
        with gc_paused(), driver.cursor(binary=True) as cursor:
            grids = cursor.execute("SELECT grids FROM new_releases").fetchone()[0]
            return SlotRelease(head=head, grids=grids).answer()

    def listing(table: Table, column: str, n_grids: Any) -> Callable[[], object]:
        a = cast(table.c[column], JSONB)
        query = table.select().with_only_columns(
            a["slot_start"].as_string(), a["slots"].as_integer(), a["partition"].as_string(),
            a["max_user_cost"].as_float(), n_grids, a["h3_resolution"].as_integer(),
        )  # fmt: skip
        return lambda: conn.execute(query).all()

    return {
        "store (before)": store_old,
        "store (after)": store_new,
        "read (before)": read_old,
        "read (after)": read_new,
        "listing row (before)": listing(OLD, "answer", func.jsonb_array_length(
            cast(OLD.c.answer, JSONB)["grids"])),
        "listing row (after)": listing(NEW, "head", NEW.c.n_grids),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schema", required=True, help="a day_release.py --schema schema")
    parser.add_argument("--url", default=PG_URL)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    answer, kept = newest_release(schema_url(args.url, args.schema))
    print(f"release of {len(answer['grids']):,} grids, kept sets of {len(kept.grid_ids):,} grids")
    engine = make_engine(schema_url(args.url, SCRATCH))
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SCRATCH}")
        conn.commit()
        meta.create_all(conn)
        conn.exec_driver_sql(  # as migration 0011 does where the server has lz4
            "DO $$ BEGIN ALTER TABLE new_releases ALTER COLUMN grids SET COMPRESSION lz4,"
            " ALTER COLUMN kept SET COMPRESSION lz4; EXCEPTION WHEN feature_not_supported"
            " THEN NULL; END $$"
        )
        conn.commit()
        try:
            todo = steps(conn, answer, kept)
            conn.execute(OLD.insert().values(id=1, answer=answer, kept=kept.as_json()))
            record = SlotRelease()
            record.store(answer, kept)
            conn.execute(NEW.insert().values(
                id=1, **{c: getattr(record, c) for c in ("head", "n_grids", "grids", "kept")}
            ))  # fmt: skip
            conn.commit()
            assert todo["read (before)"]() == todo["read (after)"]()
            for name, step in todo.items():
                try:
                    runs = [timed(conn, step) for _ in range(args.repeats)]
                except DBAPIError as exc:
                    conn.rollback()
                    print(f"{name:22} fails: {str(exc.orig).splitlines()[0]}", flush=True)
                    continue
                wall, cpu, server = (statistics.median(r[i] for r in runs) for i in range(3))
                print(f"{name:22} {wall:6.2f} s wall, {cpu:5.2f} s CPU here,"
                      f" {server:5.2f} s CPU in Postgres", flush=True)  # fmt: skip
            sizes = conn.execute(text(
                "SELECT pg_column_size(answer) + pg_column_size(kept) FROM old_releases"
                " UNION ALL SELECT pg_column_size(head) + pg_column_size(grids)"
                " + pg_column_size(kept) FROM new_releases"
            )).scalars().all()  # fmt: skip
            print(f"stored size: before {sizes[0] / 1e6:.1f} MB, after {sizes[1] / 1e6:.1f} MB")
        finally:
            conn.rollback()
            conn.exec_driver_sql(f"DROP SCHEMA {SCRATCH} CASCADE")
            conn.commit()
    engine.dispose()


if __name__ == "__main__":
    main()
