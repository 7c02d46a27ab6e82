"""A query's charge as one call of ``dpgate_commit_query``
(``migrations/sql/commit_query_0009.sql``), deciding as :func:`app.ledger.rule.charge_verdict`; row
locks live for one statement. A release's charges are ``app.ledger.service.charge_accounts``'."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any, Protocol

import orjson
from psycopg import AsyncConnection

from app.db.unit import int_array
from app.ledger.rule import Charge, Verdict


class AnswerRow(Protocol):
    """A query's answer as stored beside its charge (``app.queries.repository.AnswerRecord``)."""

    @property
    def public_id(self) -> str: ...
    @property
    def grid_version(self) -> int: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def statistic(self) -> str: ...
    @property
    def mechanism(self) -> str: ...
    @property
    def options(self) -> dict[str, Any]: ...
    @property
    def answer(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Committed:
    """What a query commit did; ``stored`` is the twin's answer when ``verdict`` is TWIN."""

    verdict: Verdict
    stored: dict[str, Any] | None = None


# The call is made only if the grid is still at the version released and its dataset's
# cap is the one passed (the function's arguments name them, so it runs after that read;
# no row: nothing was written, as ``stale``). The function re-reads the epoch under its lock.
_COMMIT_SQL = (
    "SELECT c.status, c.stored FROM grids g JOIN datasets d ON d.id = g.dataset_id, "
    "LATERAL dpgate_commit_query("
    "g.dataset_id, %(epoch)s, %(window)s, g.id, g.version, %(fingerprint)s, "
    "CAST(%(users)s AS integer[]), %(epsilon)s, d.budget_per_user, %(key)s, %(key_has_quota)s, "
    "%(public_id)s, %(statistic)s, %(mechanism)s, CAST(%(options)s AS json), "
    "CAST(%(answer)s AS json)) c "
    "WHERE g.id = %(grid)s AND g.version = %(grid_version)s AND g.dataset_id = %(dataset)s "
    "AND d.budget_per_user = %(cap)s"
)


_LOCK_DATASET_SQL = "SELECT epoch FROM datasets WHERE id = %(dataset)s FOR KEY SHARE"
_LOCK_ACCOUNTS_SQL = (
    "SELECT user_id, spent FROM budget_accounts "
    "WHERE dataset_id = %(dataset)s AND epoch = %(epoch)s AND window_start = %(window)s "
    "AND user_id = ANY (CAST(%(users)s AS integer[])) ORDER BY user_id FOR UPDATE"
)


class QueryCommitter:
    """The query commit as one autocommit statement on a connection of the query pool."""

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.conn = conn

    async def lock_spent(
        self, dataset_id: int, epoch: int, window: date, users: list[int]
    ) -> dict[int, Decimal] | None:
        """In a transaction: lock the dataset row (shared) and ``users``' accounts in the commit
        function's order; their spends, or None if the epoch moved on."""
        params = {
            "dataset": dataset_id,
            "epoch": epoch,
            "window": window,
            "users": int_array(users),
        }
        cur = await self.conn.execute(_LOCK_DATASET_SQL, params)
        row = await cur.fetchone()
        if row is None or row[0] != epoch:
            return None
        cur = await self.conn.execute(_LOCK_ACCOUNTS_SQL, params)
        return {int(u): s for u, s in await cur.fetchall()}

    async def commit_query(
        self, charge: Charge, *, cap: Decimal, key_has_quota: bool, row: AnswerRow
    ) -> Committed:
        params = {
            "dataset": charge.dataset_id,
            "epoch": charge.epoch,
            "window": charge.window,
            "grid": charge.grid_id,
            "grid_version": row.grid_version,
            "fingerprint": row.fingerprint,
            "users": int_array(charge.users),
            "epsilon": charge.epsilon,
            "cap": cap,
            "key": charge.key_id,
            "key_has_quota": key_has_quota,
            "public_id": row.public_id,
            "statistic": row.statistic,
            "mechanism": row.mechanism,
            "options": orjson.dumps(row.options).decode(),
            "answer": orjson.dumps(row.answer).decode(),
        }
        cur = await self.conn.execute(_COMMIT_SQL, params, prepare=True)
        result = await cur.fetchone()
        if result is None:  # the grid moved on (or went): not called, nothing written
            return Committed(Verdict.STALE)
        status, stored = result
        return Committed(Verdict(status), stored)
