"""All SQL of single-grid queries: find the grid with its stored answer, commit an answer.

On Postgres the query path runs in autocommit mode: the look-up is one read, and
the charge is one call of ``dpgate_commit_query`` (migration 0003), a single
atomic statement that locks, checks, charges and stores — so row locks live only
for that statement. SQLite has no stored functions: there the same steps run in
Python (``app.queries.service``) inside the request's ``BEGIN IMMEDIATE``
transaction, which serialises writers.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
from sqlalchemy import Connection, bindparam, select, text
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

_COMMIT = text(
    "SELECT status, stored FROM dpgate_commit_query("
    ":dataset, :epoch, :grid, :grid_version, :fingerprint, CAST(:users AS integer[]), "
    ":epsilon, :cap, :key, :key_has_quota, :public_id, :statistic, :mechanism, "
    "CAST(:options AS json), CAST(:answer AS json))"
)


def int_array_literal(values: list[int]) -> str:
    """``{1,2,3}``: an ``integer[]`` parameter as text, which the driver passes through
    (it would otherwise inspect every element to choose the array's type)."""
    return "{" + ",".join(map(str, values)) + "}"


class AnswerRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def in_database(self) -> bool:
        """True when ``commit`` runs as one database function (Postgres)."""
        return self.session.get_bind().dialect.name == "postgresql"

    def connection(self) -> Connection:
        """The request's connection; on Postgres in autocommit mode (see the module)
        unless the request already opened a transaction (then the charge commits with it)."""
        if self.in_database and not self.session.in_transaction():
            return self.session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        return self.session.connection()

    def lookup(
        self, grid_public_id: str, fingerprint: str
    ) -> tuple[GridContext, dict[str, Any] | None] | None:
        """The grid and the answer stored for ``fingerprint`` at its current version and
        its dataset's current epoch, in one round trip (no lock)."""
        row = (
            self.connection()
            .execute(_LOOKUP, {"public_id": grid_public_id, "fingerprint": fingerprint})
            .first()
        )
        if row is None:
            return None
        return GridContext(*row[:9]), row[9]

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

    def add(self, answer: QueryAnswer) -> QueryAnswer:
        self.session.add(answer)
        self.session.flush()
        return answer

    def commit_in_database(
        self, answer: QueryAnswer, users: list[int], cap: Decimal, key_has_quota: bool
    ) -> Committed:
        """Postgres: check and charge ``users``, store ``answer`` — one atomic statement."""
        row = (
            self.connection()
            .execute(
                _COMMIT,
                {
                    "dataset": answer.dataset_id,
                    "epoch": answer.epoch,
                    "grid": answer.grid_id,
                    "grid_version": answer.grid_version,
                    "fingerprint": answer.fingerprint,
                    "users": int_array_literal(users),
                    "epsilon": answer.epsilon,
                    "cap": cap,
                    "key": answer.key_id,
                    "key_has_quota": key_has_quota,
                    "public_id": answer.public_id,
                    "statistic": answer.statistic,
                    "mechanism": answer.mechanism,
                    "options": orjson.dumps(answer.options).decode(),
                    "answer": orjson.dumps(answer.answer).decode(),
                },
            )
            .one()
        )
        return Committed(row.status, row.stored)
