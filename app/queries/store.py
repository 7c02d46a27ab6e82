"""Where the steps of a query run.

The look-up and the commit function are sent from the event loop on a connection of
the query pool — two statements, each its own transaction, no thread hop, no ORM:
the query path's measured fast lane. The rarer steps (a snapshot not in the cache, a
plan's caps, the ledger read of ``exclude`` datasets, creating missing accounts,
the refusal's ``largest_epsilon``) are units of work on a database thread
(:meth:`app.db.unit.Database.run`). Each method is one transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from functools import partial
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from psycopg import AsyncConnection

from app.datasets.grid_store import GridArrays, cached_grid_snapshot, read_grid_snapshot
from app.db.unit import Database
from app.keys.service import KeyIdentity
from app.ledger import service as ledger
from app.ledger.committer import Committed, QueryCommitter
from app.ledger.rule import Charge
from app.queries.known import KnownGrids
from app.queries.repository import AnswerLookup, AnswerRecord, Found, GridContext

R = TypeVar("R")


def query_charge(
    ctx: GridContext, key: KeyIdentity, record: AnswerRecord, users: list[int]
) -> Charge:
    """The charge of a query's answer: its epsilon to each user it kept, in the budget
    window of the grid's slot (docs/math.md §10.4)."""
    return Charge.of(
        ctx.dataset_id, ctx.epoch, users, record.epsilon, window=ctx.window, key_id=key.id,
        kind="query", grid_id=ctx.id,
    )  # fmt: skip


class QueryStore:
    """The steps of one query: look-up and commit on one pooled connection, the rest
    as units of work on a database thread."""

    def __init__(
        self, database: Database, conn: AsyncConnection[Any], known: KnownGrids | None = None
    ) -> None:
        self.database = database
        self.conn = conn
        self.answers = AnswerLookup(conn)
        self.committer = QueryCommitter(conn)
        self.known = KnownGrids() if known is None else known

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(session, *args)`` as one unit of work on a database thread."""
        return await self.database.run(fn, *args)

    async def lookup(self, grid_public_id: str, fingerprint: str) -> Found | None:
        found = await self.answers.lookup(grid_public_id, fingerprint)
        if found is not None:
            self.known.remember(found[0])
        return found

    async def snapshot(self, ctx: GridContext) -> GridArrays:
        """The grid's engine input at ``ctx.version`` (from the cache when it is there)."""
        hit = cached_grid_snapshot(ctx)
        return hit if hit is not None else await self.run(read_grid_snapshot, ctx)

    async def exhausted(
        self, ctx: GridContext, user_ids: npt.NDArray[np.int64], epsilon: Decimal
    ) -> npt.NDArray[np.bool_]:
        """Bool per user: exhausted for ``epsilon`` more, as the ledger reads now."""
        return await self.run(
            partial(ledger.exhausted_now, window=ctx.window),
            ctx.dataset_id,
            ctx.epoch,
            ctx.budget_per_user,
            user_ids,
            epsilon,
        )

    async def ensure_accounts(self, ctx: GridContext, users: list[int]) -> None:
        """Create the users' missing budget accounts (a grid's first query)."""
        await self.run(
            partial(ledger.create_accounts, window=ctx.window), ctx.dataset_id, ctx.epoch, users
        )

    @asynccontextmanager
    async def locked(
        self, ctx: GridContext, user_ids: list[int]
    ) -> AsyncIterator[dict[int, Decimal] | None]:
        """A transaction on this request's connection that holds the dataset row and the
        accounts of ``user_ids`` locked: their spend (``None``: the epoch moved on). A
        :meth:`commit` inside it waits for nobody and finds no user newly exhausted."""
        async with self.conn.transaction():
            yield await self.committer.lock_spent(ctx.dataset_id, ctx.epoch, ctx.window, user_ids)

    async def commit(
        self, ctx: GridContext, key: KeyIdentity, record: AnswerRecord, users: list[int]
    ) -> Committed:
        return await self.committer.commit_query(
            query_charge(ctx, key, record, users),
            cap=ctx.budget_per_user,
            key_has_quota=key.has_quota,
            row=record,
        )


@asynccontextmanager
async def open_store(state: Any) -> AsyncIterator[QueryStore]:
    """The store for one request, holding a pool connection until the request is
    answered (``state`` is the application's ``app.state``, which keeps its process's
    :class:`KnownGrids`: one database's grids)."""
    async with state.query_pool.connection() as conn:
        yield QueryStore(state.database, conn, state.known_grids)
