"""Engine and session factory (Postgres)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from app.db.liveness import closed_while_idle, session_parameters

if TYPE_CHECKING:
    from app.db.watch import DatabaseWatch


def json_dumps(value: Any) -> str:
    """JSON columns by orjson (10× ``json.dumps`` on a stored release): string keys, ``TypeError``
    for what JSON cannot hold, NaN as ``null``."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int | None = None,
    connect_timeout: float | None = None,
    statement_timeout: float | None = None,
    watch: DatabaseWatch | None = None,
    pool_timeout: float = 120,
    lock_timeout: float | None = None,
) -> Engine:
    """An engine on Postgres: time limits as :func:`app.db.liveness.session_parameters`, closed
    pooled connections replaced at checkout, and with a ``watch`` none opened while the database
    is down (:mod:`app.db.watch`)."""
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size if max_overflow is None else max_overflow,
        pool_pre_ping=False,  # a round trip per checkout; closed_while_idle costs none
        pool_recycle=1800,
        pool_timeout=pool_timeout,
        json_serializer=json_dumps,
        connect_args=session_parameters(
            url,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            keepalive_seconds=None if watch is None else watch.silence,
            lock_timeout=lock_timeout,
        ),
    )

    @event.listens_for(engine, "checkout")
    def _replace_closed(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        if closed_while_idle(dbapi_conn):
            raise DisconnectionError("the server closed this pooled connection")

    if watch is not None:

        @event.listens_for(engine, "do_connect")
        def _refuse_while_down(*_: Any) -> None:
            watch.check()  # 503 at once rather than a connection attempt that hangs

        @event.listens_for(engine, "connect")
        def _track(dbapi_conn: Any, _record: Any) -> None:
            watch.track(dbapi_conn)

    return engine


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False, autoflush=False)
