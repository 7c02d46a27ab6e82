"""All SQL of single-grid queries: find the grid with its stored answer, commit an answer.

On Postgres the query path runs in autocommit mode: the look-up is one read, and
the charge is one call of ``dpgate_commit_query`` (migration 0003), a single
atomic statement that locks, checks, charges and stores — so row locks live only
for that statement. SQLite has no stored functions: there the same steps run in
Python (``app.queries.service``) inside the request's ``BEGIN IMMEDIATE``
transaction, which serialises writers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, and_, bindparam, select, text
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
        QueryAnswer.answer,
    )
    .join(Dataset, Dataset.id == Grid.dataset_id)
    .outerjoin(
        QueryAnswer,
        and_(
            QueryAnswer.grid_id == Grid.id,
            QueryAnswer.epoch == Dataset.epoch,
            QueryAnswer.grid_version == Grid.version,
            QueryAnswer.fingerprint == bindparam("fingerprint"),
        ),
    )
    .where(Grid.public_id == bindparam("public_id"))
)

_COMMIT = text(
    "SELECT status, stored FROM dpgate_commit_query("
    ":dataset, :epoch, :grid, :grid_version, :fingerprint, CAST(:users AS integer[]), "
    ":epsilon, :cap, :key, :key_has_quota, :public_id, :statistic, :mechanism, "
    "CAST(:options AS json), CAST(:answer AS json))"
)


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
                    "users": users,
                    "epsilon": answer.epsilon,
                    "cap": cap,
                    "key": answer.key_id,
                    "key_has_quota": key_has_quota,
                    "public_id": answer.public_id,
                    "statistic": answer.statistic,
                    "mechanism": answer.mechanism,
                    "options": json.dumps(answer.options),
                    "answer": json.dumps(answer.answer),
                },
            )
            .one()
        )
        return Committed(row.status, row.stored)
