"""An asyncio pool for the query hot path: its statements go from the event loop, in autocommit
(the commit function is one transaction), connecting with the engine's arguments for the same URL.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson
from psycopg import AsyncConnection, OperationalError
from psycopg.conninfo import make_conninfo
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from app.db.liveness import closed_while_idle, conninfo_from_url, session_parameters

if TYPE_CHECKING:
    from app.db.watch import DatabaseWatch


class QueryPool(AsyncConnectionPool):
    """The query path's pool, watched (:mod:`app.db.watch`): 503 at once while the database is
    down, and waiters stop waiting when it goes down."""

    def __init__(self, conninfo: str, *, watch: DatabaseWatch | None, **kwargs: Any) -> None:
        self.watch = watch
        self._getters: set[asyncio.Task[Any]] = set()
        self._stopped: set[asyncio.Task[Any]] = set()
        super().__init__(conninfo, configure=self._configure, **kwargs)
        if watch is not None:
            watch.on_down(self._stop_getters)

    async def _configure(self, conn: AsyncConnection) -> None:
        set_json_loads(orjson.loads, conn)  # stored answers come back as dicts, parsed fast
        if self.watch is not None:
            self.watch.track(conn)

    async def getconn(self, timeout: float | None = None) -> AsyncConnection:
        if self.watch is None:
            return await super().getconn(timeout)
        self.watch.check()
        task = asyncio.current_task()
        assert task is not None
        self._getters.add(task)
        try:
            return await super().getconn(timeout)
        except asyncio.CancelledError:
            if task not in self._stopped:
                raise
            task.uncancel()
            self.watch.check()  # raises: the database is down
            raise
        finally:
            self._getters.discard(task)
            if task in self._stopped:  # the pool may have handed it a connection anyway
                self._stopped.discard(task)
                if task.cancelling():
                    task.uncancel()

    def _stop_getters(self) -> None:
        """The database went down: the requests waiting for a connection stop waiting."""
        for task in self._getters:
            self._stopped.add(task)
            task.cancel()


async def _check(conn: AsyncConnection) -> None:
    """At checkout: refuse a connection the server closed (no round trip)."""
    if closed_while_idle(conn):
        await conn.close()  # so the pool discards it rather than offering it again
        raise OperationalError("the server closed this pooled connection")


def make_async_pool(
    url: str,
    *,
    size: int,
    connect_timeout: float | None = None,
    statement_timeout: float | None = None,
    watch: DatabaseWatch | None = None,
    timeout: float = 30,
    lock_timeout: float | None = None,
) -> QueryPool:
    """A closed pool of up to ``size`` autocommit connections (open it in the serving loop);
    ``timeout`` bounds the wait for one (then 503)."""
    params = session_parameters(
        url,
        connect_timeout=connect_timeout,
        statement_timeout=statement_timeout,
        keepalive_seconds=None if watch is None else watch.silence,
        lock_timeout=lock_timeout,
    )
    return QueryPool(
        make_conninfo(conninfo_from_url(url), **params),
        watch=watch,
        min_size=1,
        max_size=size,
        kwargs={"autocommit": True},
        check=_check,
        open=False,
        timeout=timeout,
        name="dpgate-queries",
    )
