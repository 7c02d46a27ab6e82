"""Noticing a database that stopped answering, and answering 503 in bounded time
(docs/architecture.md).

A frozen Postgres still acknowledges bytes, so each server process sends a heartbeat ``SELECT 1``
each second. When none is answered for ``silence`` seconds the database is **down**: every
connection of this process has its socket shut (waiting statements fail at once) and new ones are
refused (:meth:`DatabaseWatch.check`) until a heartbeat answers. A slow statement is never cut,
and time the process itself could not run does not count."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

from psycopg import AsyncConnection
from psycopg import Error as PsycopgError
from psycopg.conninfo import make_conninfo

from app.config import Settings
from app.db.liveness import conninfo_from_url, session_parameters
from app.kit.errors import Unavailable

log = logging.getLogger("dpgate.db")

#: Seconds between heartbeats.
INTERVAL = 1.0
#: What ``db_deadline_seconds`` leaves for shutting the sockets and answering.
MARGIN = 1.0
#: A wake-up later than this past its time means this process was stalled.
STALL_ALLOWANCE = 0.25


async def _overslept(awaitable: Awaitable[Any], seconds: float) -> bool:
    """Await ``awaitable`` (which ends within ``seconds``); whether this process woke up
    more than ``STALL_ALLOWANCE`` later than that."""
    due = time.monotonic() + seconds
    await awaitable
    return time.monotonic() - due > STALL_ALLOWANCE


def shut_socket(conn: Any) -> None:
    """Shut a psycopg connection's socket both ways: a waiting statement fails at once."""
    if conn.closed:
        return
    try:
        fd = conn.pgconn.socket
    except PsycopgError:  # no usable socket: nothing to shut
        return
    with suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


class DatabaseWatch:
    """One process's heartbeat to the database, and the connections it may shut."""

    def __init__(self, conninfo: str, *, deadline: float) -> None:
        self.conninfo = conninfo
        self.silence = max(deadline - MARGIN, 2 * INTERVAL)
        self.down_since: float | None = None
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        self._heart: AsyncConnection[Any] | None = None
        self._on_down: list[Callable[[], None]] = []

    # ---------------------------------------------------------------- the pools' side
    def track(self, conn: Any) -> None:
        """Count ``conn`` (a new psycopg connection of a pool) among those to shut."""
        with self._lock:
            self._connections.add(conn)

    def on_down(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (in the event loop) each time the database goes down."""
        self._on_down.append(callback)

    def check(self) -> None:
        """Refuse at once (503) while the database is down."""
        since = self.down_since
        if since is not None:
            waited = time.monotonic() - since + self.silence
            raise Unavailable(f"the database has not answered for {waited:.0f} s; retry later")

    # --------------------------------------------------------------- the heartbeat
    def start(self) -> None:
        """Start the heartbeat in the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="dpgate-db-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        if self._heart is not None:
            shut_socket(self._heart)
            with suppress(Exception):
                await self._heart.close()

    async def _run(self) -> None:
        last_answer = time.monotonic()
        while True:
            beat = asyncio.ensure_future(self._beat())
            while not beat.done():
                left = last_answer + self.silence - time.monotonic()
                if left <= 0:  # silent too long (or again, while down)
                    self._go_down(last_answer)
                    left = self.silence
                if await _overslept(asyncio.wait({beat}, timeout=left), left):
                    last_answer = self._after_stall(last_answer)
            if beat.exception() is None:
                last_answer = time.monotonic()
                self._go_up()
            elif self._heart is not None:  # a failed heartbeat opens a new connection
                shut_socket(self._heart)
                self._heart = None
            if await _overslept(asyncio.sleep(INTERVAL), INTERVAL):
                last_answer = self._after_stall(last_answer)

    def _after_stall(self, last_answer: float) -> float:
        """The process itself could not run for a while: give the heartbeat another interval."""
        return max(last_answer, time.monotonic() - self.silence + INTERVAL)

    async def _beat(self) -> None:
        if self._heart is None or self._heart.closed:
            self._heart = await AsyncConnection.connect(self.conninfo, autocommit=True)
        await self._heart.execute("SELECT 1")

    def _go_down(self, last_answer: float) -> None:
        with self._lock:
            connections = list(self._connections)
        if self._heart is not None:
            connections.append(self._heart)
        for conn in connections:
            shut_socket(conn)
        if self.down_since is None:
            self.down_since = time.monotonic()
            for callback in self._on_down:
                callback()
            log.error(
                "the database has not answered for %.1f s: %d connection(s) shut; requests "
                "answer 503 until it answers again",
                time.monotonic() - last_answer,
                len(connections),
            )

    def _go_up(self) -> None:
        if self.down_since is not None:
            log.warning(
                "the database answers again (down for %.1f s)", time.monotonic() - self.down_since
            )
            self.down_since = None


def make_watch(url: str, settings: Settings) -> DatabaseWatch:
    """The watch of a server process on the database at ``url`` (SQLAlchemy URL)."""
    params = session_parameters(
        url, connect_timeout=settings.db_connect_timeout_seconds, statement_timeout=None
    )
    return DatabaseWatch(
        make_conninfo(conninfo_from_url(url), **params), deadline=settings.db_deadline_seconds
    )
