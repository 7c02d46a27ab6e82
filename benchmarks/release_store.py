"""Storing and reading one stored release in the shapes of migrations 0010, 0012 and 0013.

Run ``python benchmarks/release_store.py --schema NAME`` on a schema kept by
``benchmarks/day_release.py --schema NAME`` (with a day release stored in it). Its
newest release is written and read in a scratch schema, ``--repeats``
times each way:

* before (0010): ``answer`` and ``kept`` as ``json`` columns (the engine's JSON
  serialiser, text), read back through the driver's JSON loader; the listing casts the
  answer to ``jsonb`` (a day release's is over jsonb's limit: the listing fails);
* 0012: a JSON head, the grids as orjson bytes and the kept sets as columns in
  ``bytea``, compressed by Postgres (lz4 where the server has it), read back as a binary
  result, the collector paused; the listing casts the head;
* after (0013): as 0012, but both columns packed by ``SlotRelease.store`` (zstd,
  ``app.releases.packing``) into ``STORAGE EXTERNAL`` columns, read back with
  ``SlotRelease.answer``.

The steps alternate, round after round (``--repeats`` rounds).

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

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import JSON, Column, Integer, LargeBinary, MetaData, Table, cast, func, text  # noqa: E402
from sqlalchemy.dialects.postgresql import JSONB  # noqa: E402
from sqlalchemy.engine import Connection  # noqa: E402
from sqlalchemy.exc import DBAPIError  # noqa: E402

from app.db.engine import make_engine  # noqa: E402
from app.kit.gc_pause import gc_paused  # noqa: E402
from app.releases.kept_sets import KeptSets  # noqa: E402
from app.releases.models import ORJSON_OPTIONS, SlotRelease  # noqa: E402
from app.releases.packing import unpack  # noqa: E402
from benchmarks.postgres import PG_URL, cpu_seconds, schema_url  # noqa: E402

SCRATCH = "release_store_bench"
meta = MetaData()
OLD = Table("old_releases", meta, Column("id", Integer, primary_key=True),
            Column("answer", JSON), Column("kept", JSON))  # fmt: skip
MID, NEW = (
    Table(name, meta, Column("id", Integer, primary_key=True), Column("head", JSON),
          Column("n_grids", Integer), Column("grids", LargeBinary), Column("kept", LargeBinary))
    for name in ("mid_releases", "new_releases")
)  # fmt: skip


def newest_release(url: str) -> tuple[dict[str, Any], KeptSets]:
    """The answer and kept sets of the schema's newest release."""
    engine = make_engine(url)
    with engine.connect() as conn:
        newest = "FROM slot_releases ORDER BY created_at DESC LIMIT 1"
        row = conn.execute(text(f"SELECT head, grids, kept {newest}")).one()
        answer = SlotRelease(head=row.head, grids=row.grids).answer()
    engine.dispose()
    return answer, KeptSets.from_bytes(unpack(row.kept))


def mid_row(answer: dict[str, Any], kept: KeptSets) -> dict[str, Any]:
    """The row as ``SlotRelease.store`` wrote it at migration 0012: bytes not packed."""
    return {
        "head": {**answer, "grids": None},
        "n_grids": len(answer["grids"]),
        "grids": orjson.dumps(answer["grids"], option=ORJSON_OPTIONS),
        "kept": kept.to_bytes(),
    }


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

    def store_mid() -> None:
        conn.execute(MID.insert().values(id=2, **mid_row(answer, kept)))
        conn.execute(MID.delete().where(MID.c.id == 2))
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

    def read(table: Table, packed: bool) -> Callable[[], dict]:
        def step() -> dict:  # as ReleaseRepository.with_grids and GET /releases/{id} do
            head = conn.execute(table.select().with_only_columns(table.c.head)).scalar_one()
            driver = conn.connection.driver_connection
            assert driver is not None
            with gc_paused(), driver.cursor(binary=True) as cursor:
                grids = cursor.execute(f"SELECT grids FROM {table.name}").fetchone()[0]
                if not packed:
                    return {**head, "grids": orjson.loads(grids)}
                return SlotRelease(head=head, grids=grids).answer()

        return step

    def listing(table: Table, column: str, n_grids: Any) -> Callable[[], object]:
        a = cast(table.c[column], JSONB)
        query = table.select().with_only_columns(
            a["slot_start"].as_string(), a["slots"].as_integer(), a["partition"].as_string(),
            a["max_user_cost"].as_float(), n_grids, a["h3_resolution"].as_integer(),
        )  # fmt: skip
        return lambda: conn.execute(query).all()

    return {
        "store (before)": store_old,
        "store (0012)": store_mid,
        "store (after)": store_new,
        "read (before)": read_old,
        "read (0012)": read(MID, packed=False),
        "read (after)": read(NEW, packed=True),
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
            "DO $$ BEGIN ALTER TABLE mid_releases ALTER COLUMN grids SET COMPRESSION lz4,"
            " ALTER COLUMN kept SET COMPRESSION lz4; EXCEPTION WHEN feature_not_supported"
            " THEN NULL; END $$"
        )
        conn.exec_driver_sql(  # as migration 0013 does
            "ALTER TABLE new_releases ALTER COLUMN grids SET STORAGE EXTERNAL,"
            " ALTER COLUMN kept SET STORAGE EXTERNAL"
        )
        conn.commit()
        try:
            todo = steps(conn, answer, kept)
            conn.execute(OLD.insert().values(id=1, answer=answer, kept=kept.as_json()))
            conn.execute(MID.insert().values(id=1, **mid_row(answer, kept)))
            record = SlotRelease()
            record.store(answer, kept)
            conn.execute(NEW.insert().values(
                id=1, **{c: getattr(record, c) for c in ("head", "n_grids", "grids", "kept")}
            ))  # fmt: skip
            conn.commit()
            read_back = todo["read (before)"]()
            assert read_back == todo["read (0012)"]() == todo["read (after)"]()
            runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in todo}
            for _ in range(args.repeats):  # the steps alternate, round after round
                for name, step in todo.items():
                    try:
                        runs[name].append(timed(conn, step))
                    except DBAPIError as exc:
                        conn.rollback()
                        print(f"{name:22} fails: {str(exc.orig).splitlines()[0]}", flush=True)
            for name, got in runs.items():
                if got:
                    wall, cpu, server = (statistics.median(r[i] for r in got) for i in range(3))
                    print(f"{name:22} {wall:6.2f} s wall, {cpu:5.2f} s CPU here,"
                          f" {server:5.2f} s CPU in Postgres")  # fmt: skip
            sizes = conn.execute(text(
                "SELECT pg_column_size(answer) + pg_column_size(kept) FROM old_releases"
                " UNION ALL SELECT pg_column_size(head) + pg_column_size(grids)"
                " + pg_column_size(kept) FROM mid_releases"
                " UNION ALL SELECT pg_column_size(head) + pg_column_size(grids)"
                " + pg_column_size(kept) FROM new_releases"
            )).scalars().all()  # fmt: skip
            print("stored size: " + ", ".join(
                f"{name} {size / 1e6:.1f} MB" for name, size in zip(
                    ("before", "0012", "after"), sizes, strict=True)
            ))  # fmt: skip
        finally:
            conn.rollback()
            conn.exec_driver_sql(f"DROP SCHEMA {SCRATCH} CASCADE")
            conn.commit()
    engine.dispose()


if __name__ == "__main__":
    main()
