"""Engine and session factory for SQLite (embedded default) and Postgres."""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from app.db.liveness import closed_while_idle, session_parameters


def json_dumps(value: Any) -> str:
    """How JSON columns are written, on both dialects: orjson (a stored release of 10⁴
    grids is serialised in a tenth of the time of ``json.dumps``). Keys become strings, as
    ``json.dumps`` makes them; objects JSON cannot hold are refused (``TypeError``); a
    NaN is written as ``null`` (``json.dumps`` wrote ``NaN``, which is not JSON)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    connect_timeout: float | None = None,
    statement_timeout: float | None = None,
) -> Engine:
    """Create an engine; on SQLite every transaction is ``BEGIN IMMEDIATE``.

    Immediate transactions take SQLite's write lock up front, so two processes
    that both read a budget and then charge it are serialised rather than both
    succeeding on a stale read. On Postgres, ``connect_timeout`` and
    ``statement_timeout`` (seconds) bound a connection attempt and each statement,
    and a pooled connection the server closed is replaced at checkout
    (:mod:`app.db.liveness`).
    """
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"timeout": 60, "check_same_thread": False},
            json_serializer=json_dumps,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,  # a round trip per checkout; closed_while_idle costs none
        pool_recycle=1800,
        pool_timeout=120,
        json_serializer=json_dumps,
        connect_args=session_parameters(
            url, connect_timeout=connect_timeout, statement_timeout=statement_timeout
        ),
    )

    @event.listens_for(engine, "checkout")
    def _replace_closed(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        if closed_while_idle(dbapi_conn):
            raise DisconnectionError("the server closed this pooled connection")

    return engine


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False, autoflush=False)
