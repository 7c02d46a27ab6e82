"""All SQL of single-grid queries: find the grid with its stored answer.

The look-up (:class:`AnswerLookup`, on the event loop, autocommit) is one read; the
commit is ``app.ledger.committer``'s (one call of ``dpgate_commit_query``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from psycopg import AsyncConnection
from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

from app.datasets.models import Dataset, Grid
from app.queries.models import QueryAnswer
from app.time.budget_windows import ALL_TIME, privacy_unit, window_of
from app.time.slots import datetime_to_us, format_local, get_zone


@dataclass(frozen=True)
class GridContext:
    """A grid at its current version and its dataset's settings at its current epoch;
    ``window`` is the budget window its slot lies in (docs/math.md §10.4)."""

    id: int
    public_id: str
    version: int
    dataset_id: int
    epoch: int
    value_bound: float
    budget_per_user: Decimal
    max_epsilon_per_query: Decimal
    on_exhausted: str
    slot_start: datetime
    budget_window: str
    timezone: str
    value_unit: str | None
    h3_cell: str
    window: date = ALL_TIME

    def where(self) -> dict[str, str]:
        """The grid's ``h3_cell`` and ``slot_start`` (local ISO 8601), for its answers."""
        start = format_local(datetime_to_us(self.slot_start), get_zone(self.timezone))
        return {"h3_cell": self.h3_cell, "slot_start": start}

    @property
    def privacy_unit(self) -> str:
        return privacy_unit(self)


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
        Grid.slot_start,
        Dataset.budget_window,
        Dataset.timezone,
        Dataset.value_unit,
        Grid.h3_cell,
        _STORED,
    )
    .join(Dataset, Dataset.id == Grid.dataset_id)
    .where(Grid.public_id == bindparam("public_id"))
)

_LOOKUP_SQL = str(_LOOKUP.compile(dialect=PGDialect_psycopg()))


def _found(row: Any) -> Found | None:
    if row is None:
        return None
    ctx = GridContext(*row[:14])
    if ctx.budget_window != "none":
        ctx = replace(ctx, window=window_of(ctx, ctx.slot_start))
    return ctx, row[14]


class AnswerLookup:
    """From the event loop: the look-up, its own (autocommit) transaction on a
    connection of the query pool, in one round trip (no lock)."""

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.conn = conn

    async def lookup(self, grid_public_id: str, fingerprint: str) -> Found | None:
        params = {"public_id": grid_public_id, "fingerprint": fingerprint}
        cur = await self.conn.execute(_LOOKUP_SQL, params, prepare=True)
        return _found(await cur.fetchone())
