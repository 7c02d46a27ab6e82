"""Units of work: the caller that owns the work owns its transaction; no repository commits
(docs/architecture.md).

In a server: a request's ``SessionDep`` (committed once after the endpoint), :meth:`Database.run`
(one unit on a database thread) and the query pool's autocommit statements. Elsewhere:
``sessionmaker.begin()``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from app.db.capacity import Capacity

R = TypeVar("R")


class Database:
    """Runs units of work, each in one hop to a database thread, after entering the general
    capacity (shared with ``get_session``): commit if ``fn`` returns, roll back if it raises."""

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


def driver_connection(session: Session) -> Any:
    """The psycopg connection under ``session`` (``COPY``, binary results)."""
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
    """The rows of ``query`` in the session's transaction, fetched in binary."""
    with driver_connection(session).cursor(binary=True) as cursor:
        cursor.execute(query, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows
