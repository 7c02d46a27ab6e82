"""Postgres connections: time limits, and spotting at checkout (one ``select()``, no round trip)
the idle ones a server restart closed."""

from __future__ import annotations

import math
import select
from typing import Any

from psycopg.conninfo import make_conninfo
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import make_url


def closed_while_idle(conn: Any) -> bool:
    """Whether an idle psycopg connection was closed by the server: its socket is readable."""
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


#: A session idle inside a transaction for this many statement timeouts is ended.
IDLE_IN_TRANSACTION_FACTOR = 10


def session_parameters(
    url: str,
    *,
    connect_timeout: float | None,
    statement_timeout: float | None,
    keepalive_seconds: float | None = None,
    lock_timeout: float | None = None,
) -> dict[str, Any]:
    """libpq parameters adding the time limits to ``url``'s (``options`` merged).

    ``idle_in_transaction_session_timeout`` is ``IDLE_IN_TRANSACTION_FACTOR`` ×
    ``statement_timeout`` (a release computes between statements); ``keepalive_seconds`` turns on
    TCP keepalives; ``lock_timeout`` bounds every lock wait."""
    params: dict[str, Any] = {}
    if connect_timeout is not None:  # libpq takes whole seconds, at least 2
        params["connect_timeout"] = max(2, math.ceil(connect_timeout))
    limits = []
    if statement_timeout:
        ms = max(1, round(statement_timeout * 1000))
        idle = ms * IDLE_IN_TRANSACTION_FACTOR
        limits += [f"-c statement_timeout={ms}", f"-c idle_in_transaction_session_timeout={idle}"]
    if lock_timeout:
        limits.append(f"-c lock_timeout={max(1, round(lock_timeout * 1000))}")
    if limits:
        own = make_url(url).query.get("options") or ""
        if isinstance(own, tuple):
            own = " ".join(own)
        params["options"] = " ".join([own, *limits]).strip()
    if keepalive_seconds:  # idle, then `count` probes `interval` apart (whole seconds)
        interval = max(1, math.floor(keepalive_seconds / 4))
        params.update(
            keepalives=1,
            keepalives_idle=max(1, math.floor(keepalive_seconds) - 3 * interval),
            keepalives_interval=interval,
            keepalives_count=3,
        )
    return params


def conninfo_from_url(url: str) -> str:
    """The libpq connection string for a SQLAlchemy ``postgresql+psycopg://`` URL."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"not a Postgres URL: {parsed.render_as_string()}")
    _, kwargs = PGDialect_psycopg().create_connect_args(parsed)
    return make_conninfo(**kwargs)
