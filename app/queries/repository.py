"""All SQL of single-grid queries: find the grid with its stored answer, commit an answer.

On Postgres (:class:`AsyncAnswerRepository`, on the event loop, autocommit) the
look-up is one read, and the charge is one call of ``dpgate_commit_query``
(migration 0003), a single atomic statement that locks, checks, charges and
stores — so row locks live only for that statement. SQLite has no stored
functions: there (:class:`AnswerRepository`) the same steps run in Python
(``app.queries.store.commit_here``) inside a ``BEGIN IMMEDIATE`` transaction,
which serialises writers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
from psycopg import AsyncConnection
from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.orm import Session

from app.datasets.models import Dataset, Grid
from app.queries.models import QueryAnswer


@dataclass(frozen=True)
class GridContext:
    """A grid at its current version and its dataset's settings at its current epoch."""

    id: int
    public_id: str
    version: int
    dataset_id: int
    epoch: int
    value_bound: float
    budget_per_user: Decimal
    max_epsilon_per_query: Decimal
    on_exhausted: str


@dataclass(frozen=True)
class AnswerRecord:
    """A fresh answer and everything stored with it (not yet stored)."""

    public_id: str
    dataset_id: int
    grid_id: int
    epoch: int
    grid_version: int
    fingerprint: str
    statistic: str
    mechanism: str
    epsilon: Decimal
    options: dict[str, Any]
    answer: dict[str, Any]
    key_id: int


#: The grid (with its dataset's settings) and the answer stored for the query, if any.
Found = tuple[GridContext, dict[str, Any] | None]


@dataclass(frozen=True)
class Committed:
    """What ``commit`` did: ``ok``, or why not (``stale``, ``missing``, ``exhausted``,
    ``quota``), or ``twin`` with the identical answer stored meanwhile."""

    status: str
    stored: dict[str, Any] | None = None


# The stored answer is a correlated scalar subquery, not an outer join: as a join,
# Postgres without statistics (autovacuum off or lagging) planned it as a scan of the
# whole ``(grid_id, epoch, grid_version, fingerprint)`` index filtered by epoch and
# fingerprint, 2-4 ms at 16k answers and growing; as a subquery its four keys are
# always the index condition (one leaf page, whatever the table holds).
_STORED = (
    select(QueryAnswer.answer)
    .where(
        QueryAnswer.grid_id == Grid.id,
        QueryAnswer.epoch == Dataset.epoch,
        QueryAnswer.grid_version == Grid.version,
        QueryAnswer.fingerprint == bindparam("fingerprint"),
    )
    .correlate(Grid, Dataset)
    .scalar_subquery()
)

_LOOKUP = (
    select(
        Grid.id,
        Grid.public_id,
        Grid.version,
        Dataset.id,
        Dataset.epoch,
        Dataset.value_bound,
        Dataset.budget_per_user,
        Dataset.max_epsilon_per_query,
        Dataset.on_exhausted,
        _STORED,
    )
    .join(Dataset, Dataset.id == Grid.dataset_id)
    .where(Grid.public_id == bindparam("public_id"))
)

_COMMIT_SQL = (
    "SELECT status, stored FROM dpgate_commit_query("
    "%(dataset)s, %(epoch)s, %(grid)s, %(grid_version)s, %(fingerprint)s, "
    "CAST(%(users)s AS integer[]), %(epsilon)s, %(cap)s, %(key)s, %(key_has_quota)s, "
    "%(public_id)s, %(statistic)s, %(mechanism)s, CAST(%(options)s AS json), "
    "CAST(%(answer)s AS json))"
)
_LOOKUP_SQL = str(_LOOKUP.compile(dialect=PGDialect_psycopg()))


def int_array_literal(values: list[int]) -> str:
    """``{1,2,3}``: an ``integer[]`` parameter as text, which the driver passes through
    (it would otherwise inspect every element to choose the array's type)."""
    return "{" + ",".join(map(str, values)) + "}"


def _found(row: Any) -> Found | None:
    return None if row is None else (GridContext(*row[:9]), row[9])


class AnswerRepository:
    """SQLite (and any session): the look-up, and the steps of a commit."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def lookup(self, grid_public_id: str, fingerprint: str) -> Found | None:
        """The grid and the answer stored for ``fingerprint`` at its current version and
        its dataset's current epoch, in one round trip (no lock)."""
        params = {"public_id": grid_public_id, "fingerprint": fingerprint}
        return _found(self.session.execute(_LOOKUP, params).first())

    def find(
        self, grid_id: int, epoch: int, grid_version: int, fingerprint: str
    ) -> QueryAnswer | None:
        return self.session.scalars(
            select(QueryAnswer).where(
                QueryAnswer.grid_id == grid_id,
                QueryAnswer.epoch == epoch,
                QueryAnswer.grid_version == grid_version,
                QueryAnswer.fingerprint == fingerprint,
            )
        ).first()

    def add(self, record: AnswerRecord) -> QueryAnswer:
        row = QueryAnswer(**dataclasses.asdict(record))
        self.session.add(row)
        self.session.flush()
        return row


class AsyncAnswerRepository:
    """Postgres, from the event loop: the look-up and the one-statement commit, each
    its own (autocommit) transaction on a connection of the query pool."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def lookup(self, grid_public_id: str, fingerprint: str) -> Found | None:
        params = {"public_id": grid_public_id, "fingerprint": fingerprint}
        cur = await self.conn.execute(_LOOKUP_SQL, params, prepare=True)
        return _found(await cur.fetchone())

    async def commit(
        self, record: AnswerRecord, users: list[int], cap: Decimal, key_has_quota: bool
    ) -> Committed:
        """Check and charge ``users``, store ``record`` — one atomic statement."""
        params = {
            "dataset": record.dataset_id,
            "epoch": record.epoch,
            "grid": record.grid_id,
            "grid_version": record.grid_version,
            "fingerprint": record.fingerprint,
            "users": int_array_literal(users),
            "epsilon": record.epsilon,
            "cap": cap,
            "key": record.key_id,
            "key_has_quota": key_has_quota,
            "public_id": record.public_id,
            "statistic": record.statistic,
            "mechanism": record.mechanism,
            "options": orjson.dumps(record.options).decode(),
            "answer": orjson.dumps(record.answer).decode(),
        }
        cur = await self.conn.execute(_COMMIT_SQL, params, prepare=True)
        status, stored = await cur.fetchone()
        return Committed(status, stored)
