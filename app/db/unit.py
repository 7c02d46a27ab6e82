"""Units of work: who opens, commits and rolls back a transaction.

One rule: the caller that owns the work owns its transaction, and no repository
commits on its own. In a server process:

* a request's ``SessionDep`` (``app.http.deps.get_session``): the endpoint works in the
  session; the request commits once after it returns, before the response leaves;
* :meth:`Database.run`: ``fn(session, *args)`` as a whole unit (open, work, commit or
  roll back, close) in one hop to a database thread, for async code with no request
  session (a query's rarer steps, ``app.queries.store``; the start-up key);
* the query path's fast lane, the same look-up, commit and key look-up as
  statements sent from the event loop on the query pool (``app.db.pg_async``), each
  its own autocommit transaction;
* :func:`separate_transaction`, the one exception: budget accounts are created and
  committed on their own before a release's transaction locks them (so that one
  never holds an insert lock outside the ascending lock order).

Outside a server (the CLI, the demo's set-up, start-up checks) a unit is
``sessionmaker.begin()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from app.db.capacity import Capacity

R = TypeVar("R")


class Database:
    """Runs units of work, each in one hop to one of the process's database threads.

    A unit enters the process's general database capacity first (shared with
    ``app.http.deps.get_session``, so the two together never hold more connections than
    the pool has), then runs ``fn(session, *args)`` on a thread of its own executor,
    committing if ``fn`` returns and rolling back if it raises, and closes the
    session — all in that one thread, which never waits for another request.
    """

    def __init__(self, make_session: sessionmaker[Session], gate: Capacity) -> None:
        self.make_session = make_session
        self.gate = gate
        self.executor = ThreadPoolExecutor(gate.total, thread_name_prefix="dpgate-db")

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        async with self.gate.held():
            return await asyncio.get_running_loop().run_in_executor(
                self.executor, self._unit, fn, args
            )

    def _unit(self, fn: Callable[..., R], args: tuple[Any, ...]) -> R:
        with self.make_session() as session:
            try:
                result = fn(session, *args)
            except BaseException:
                session.rollback()
                raise
            session.commit()
            return result

    def close(self) -> None:
        self.executor.shutdown(wait=True)


@contextmanager
def separate_transaction(session: Session) -> Iterator[Session]:
    """A transaction beside ``session``'s (a second session on the same engine),
    committed when the block ends, rolled back if it raises."""
    with Session(bind=session.get_bind()) as own:
        try:
            yield own
        except BaseException:
            own.rollback()
            raise
        own.commit()


def driver_connection(session: Session) -> Any:
    """The psycopg connection under ``session``, in its transaction: for what SQLAlchemy
    does not expose (``COPY``, binary results)."""
    driver = session.connection().connection.driver_connection
    if driver is None:
        raise RuntimeError("the session's connection is closed")
    return driver


def int_array(values: Iterable[int] | np.ndarray) -> str:
    """An ``integer[]`` parameter as text (``{1,2,3}``), passed through by the driver (which
    would otherwise inspect every element of a list)."""
    items = values.tolist() if isinstance(values, np.ndarray) else values
    return "{" + ",".join(map(str, items)) + "}"


def binary_rows(session: Session, query: Any, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of ``query`` in the session's transaction, fetched in binary (``bytea``
    as bytes, not the hex text that is twice their size and slow to decode)."""
    with driver_connection(session).cursor(binary=True) as cursor:
        cursor.execute(query, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows
