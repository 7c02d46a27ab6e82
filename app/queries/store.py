"""Where the steps of a query run.

* Postgres (:class:`PostgresQueryStore`): the look-up and the commit function are
  sent from the event loop on a connection of the query pool — two statements,
  no thread hop, no ORM.
* SQLite (:class:`QueryStore`): each step is a unit of work on a database
  thread (``app.deps.Database``); the commit re-checks everything inside its
  ``BEGIN IMMEDIATE`` transaction (:func:`commit_here`), as the Postgres function
  does in its one statement.

The rarer steps (a snapshot not in the cache, a plan's caps, the ledger read of
``exclude`` datasets, creating missing accounts) are units on a database thread
in both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import numpy as np
from psycopg import AsyncConnection
from sqlalchemy.orm import Session

from app.datasets.grid_store import GridArrays, cached_grid_snapshot, read_grid_snapshot
from app.deps import Database
from app.errors import BudgetExhausted
from app.keys.service import KeyIdentity, spend_quota
from app.ledger import service as ledger
from app.queries.repository import (
    AnswerRecord,
    AnswerRepository,
    AsyncAnswerRepository,
    Committed,
    Found,
    GridContext,
)

R = TypeVar("R")


class QueryStore:
    """Every step a unit of work on a database thread (SQLite; the base of both)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(session, *args)`` as one unit of work on a database thread."""
        return await self.database.run(fn, *args)

    async def lookup(self, grid_public_id: str, fingerprint: str) -> Found | None:
        return await self.run(_lookup, grid_public_id, fingerprint)

    async def snapshot(self, ctx: GridContext) -> GridArrays:
        """The grid's engine input at ``ctx.version`` (from the cache when it is there)."""
        hit = cached_grid_snapshot(ctx)
        return hit if hit is not None else await self.run(read_grid_snapshot, ctx)

    async def commit(
        self, ctx: GridContext, key: KeyIdentity, record: AnswerRecord, users: list[int]
    ) -> Committed:
        return await self.run(commit_here, ctx, key, record, users)


class PostgresQueryStore(QueryStore):
    """The look-up and the commit on the event loop, on one pooled connection."""

    def __init__(self, database: Database, conn: AsyncConnection) -> None:
        super().__init__(database)
        self.answers = AsyncAnswerRepository(conn)

    async def lookup(self, grid_public_id: str, fingerprint: str) -> Found | None:
        return await self.answers.lookup(grid_public_id, fingerprint)

    async def commit(
        self, ctx: GridContext, key: KeyIdentity, record: AnswerRecord, users: list[int]
    ) -> Committed:
        return await self.answers.commit(record, users, ctx.budget_per_user, key.has_quota)


@asynccontextmanager
async def open_store(state: Any) -> AsyncIterator[QueryStore]:
    """The store for one request: on Postgres it holds a pool connection until the
    request is answered (``state`` is the application's ``app.state``)."""
    pool = state.query_pool
    if pool is None:
        yield QueryStore(state.database)
        return
    async with pool.connection() as conn:
        yield PostgresQueryStore(state.database, conn)


def _lookup(session: Session, grid_public_id: str, fingerprint: str) -> Found | None:
    return AnswerRepository(session).lookup(grid_public_id, fingerprint)


def commit_here(
    session: Session, ctx: GridContext, key: KeyIdentity, record: AnswerRecord, users: list[int]
) -> Committed:
    """``dpgate_commit_query`` in Python, for SQLite (whose transaction is
    ``BEGIN IMMEDIATE``): the same checks in the same order, then charge and store."""
    dataset = ledger.lock_dataset(session, ctx.dataset_id)
    if dataset.epoch != ctx.epoch:
        return Committed("stale")
    charged = np.asarray(users, dtype=np.int64)
    budget = ledger.lock_budget(session, dataset, ctx.epoch, charged)
    answers = AnswerRepository(session)
    twin = answers.find(record.grid_id, record.epoch, record.grid_version, record.fingerprint)
    if twin is not None:
        return Committed("twin", twin.answer)
    if budget.exhausted(charged, record.epsilon).any():
        return Committed("exhausted")
    try:
        spend_quota(session, key, record.epsilon)
    except BudgetExhausted:
        return Committed("quota")
    stored = answers.add(record)
    ledger.charge(
        session,
        budget,
        users,
        record.epsilon,
        key_id=key.id,
        kind="query",
        reference_id=stored.id,
        grid_id=record.grid_id,
    )
    return Committed("ok")
