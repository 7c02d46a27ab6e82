"""What the benchmarks share: the Postgres server they run on, a fresh schema for a run,
a schema's URL, and a local process's CPU time."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PG_URL = os.environ.get(
    "DPGATE_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def fresh_database(
    kind: str, tmp: Path, server: str | None = None
) -> tuple[str, Callable[[], None]]:
    """A new empty database (a Postgres schema) and how to drop it."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.pool import NullPool

    schema = "bench_" + uuid.uuid4().hex[:12]
    server = server or PG_URL
    admin = create_engine(server, poolclass=NullPool)
    for attempt in range(60):  # a shared server may be out of connections for a while
        try:
            with admin.begin() as conn:
                conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
            break
        except OperationalError:
            if attempt == 59:
                raise
            time.sleep(2)
    url = schema_url(server, schema)

    def drop() -> None:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()

    return url, drop


def schema_url(server: str, schema: str) -> str:
    """The URL of Postgres schema ``schema`` on ``server`` (its search path)."""
    from sqlalchemy.engine import make_url

    url = make_url(server).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) of a local process so far, or NaN where unknown (the
    server is remote, or there is no ``/proc``). Unlike wall time, barely moved by other
    work on a shared machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def copy_floor(csv_chunks: Iterator[bytes], columns: str, tmp: Path) -> float:
    """Seconds to ``COPY`` a CSV (with a header) into an unindexed table of ``columns``
    (``"name type, ..."``) in a fresh schema: the floor an ingestion is compared with."""
    from sqlalchemy import create_engine

    url, drop = fresh_database("postgres", tmp)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE TABLE floor ({columns})")
            driver: Any = conn.connection.driver_connection
            start = time.perf_counter()
            with (
                driver.cursor() as cur,
                cur.copy("COPY floor FROM STDIN (FORMAT csv, HEADER)") as c,
            ):
                for chunk in csv_chunks:
                    c.write(chunk)
        return time.perf_counter() - start
    finally:
        engine.dispose()
        drop()
