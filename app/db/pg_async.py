"""An asyncio connection pool to Postgres for the query hot path.

A single-grid query needs two statements (the look-up and the atomic commit
function); sent from the event loop, they cost no hop to a thread and no ORM
round. The pool connects with exactly the arguments SQLAlchemy's engine uses for
the same URL (host, database, user, ``options`` such as a ``search_path``), in
autocommit mode: each statement is its own transaction, which is what the commit
function is written for (``migrations/versions/0003``).
"""

from __future__ import annotations

import orjson
from psycopg import AsyncConnection, OperationalError
from psycopg.conninfo import make_conninfo
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import make_url

from app.db.liveness import closed_while_idle, session_parameters


def conninfo_from_url(url: str) -> str:
    """The libpq connection string for a SQLAlchemy ``postgresql+psycopg://`` URL."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"not a Postgres URL: {parsed.render_as_string()}")
    _, kwargs = PGDialect_psycopg().create_connect_args(parsed)
    return make_conninfo(**kwargs)


async def _configure(conn: AsyncConnection) -> None:
    set_json_loads(orjson.loads, conn)  # stored answers come back as dicts, parsed fast


async def _check(conn: AsyncConnection) -> None:
    """At checkout: refuse a connection the server closed (no round trip; the pool
    then takes or opens another)."""
    if closed_while_idle(conn):
        await conn.close()  # so the pool discards it rather than offering it again
        raise OperationalError("the server closed this pooled connection")


def make_async_pool(
    url: str,
    *,
    size: int,
    connect_timeout: float | None = None,
    statement_timeout: float | None = None,
) -> AsyncConnectionPool:
    """A closed pool of up to ``size`` autocommit connections; open it in the serving
    event loop (``await pool.open()``) and close it there. Time limits as in
    :func:`app.db.engine.make_engine`."""
    params = session_parameters(
        url, connect_timeout=connect_timeout, statement_timeout=statement_timeout
    )
    return AsyncConnectionPool(
        make_conninfo(conninfo_from_url(url), **params),
        min_size=1,
        max_size=size,
        kwargs={"autocommit": True},
        configure=_configure,
        check=_check,
        open=False,
        timeout=30,  # waiting longer for a free connection: 503, retry
        name="dpgate-queries",
    )
