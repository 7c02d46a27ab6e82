"""Postgres connections: time limits, and spotting the ones a server restart closed.

A pooled connection that sat idle while Postgres restarted is dead, but nothing
says so until a statement fails on it (a 503 per stale connection). Postgres tells
its clients when it shuts down (a ``FATAL`` message, then the socket closes), so an
idle connection whose socket has anything to read was closed under it: checking for
that is one ``select()`` call at checkout, no round trip to the server.
"""

from __future__ import annotations

import math
import select
from typing import Any

from psycopg.conninfo import make_conninfo
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import make_url


def closed_while_idle(conn: Any) -> bool:
    """Whether an idle psycopg connection was closed by the server (or is unusable).

    An idle connection expects nothing from the server, so a readable socket means a
    termination notice or end of file (an unsolicited notice, e.g. ``NOTIFY``, also
    makes it readable: a needless reconnect, as dpgate listens to none)."""
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
    """libpq connection parameters adding the time limits to those of ``url``
    (``options`` is merged with the URL's own, e.g. a ``search_path``).

    ``IDLE_IN_TRANSACTION_FACTOR`` times ``statement_timeout`` also bounds how long a
    session may sit idle inside a transaction (``idle_in_transaction_session_timeout``:
    a client that stopped midway releases its row locks). Not the statement timeout
    itself: between two statements of its transaction a release computes in Python for
    as long as its slots need (a day of a 10⁶-record-per-hour city plans and draws for
    over a minute), and being cut there would waste the whole release.
    ``keepalive_seconds`` turns on TCP keepalives that find a peer gone from the network
    in about that time on an idle connection (a stopped server's kernel still answers
    them: ``app.db.watch`` covers that case). ``lock_timeout`` bounds every wait for a
    row or table lock (a server's: its deadline, then 503)."""
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
