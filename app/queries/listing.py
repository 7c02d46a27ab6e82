"""``GET /queries``: the calling key's own stored answers, newest first.

A stored answer is re-read here for free; ``reusable`` says whether asking the same
query again now would also return it for free (same budget epoch, grid unchanged).
Times are local with the dataset's offset, as everywhere in the API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.datasets.models import Dataset, Grid
from app.db.base import Repository
from app.queries.models import QueryAnswer
from app.queries.schemas import StoredAnswer, StoredAnswerList
from app.time.budget_windows import privacy_unit
from app.time.slots import datetime_to_us, format_local, get_zone


@dataclass(frozen=True)
class StoredRow:
    """A stored answer with what the listing shows beside it."""

    answer: QueryAnswer
    grid_public_id: str
    timezone: str
    reusable: bool
    budget_window: str


class StoredAnswerRepository(Repository):
    """All SQL of the listing (index ``ix_query_answers_key_id_id``, migration 0007)."""

    def _select(self) -> Any:
        reusable = (QueryAnswer.epoch == Dataset.epoch) & (QueryAnswer.grid_version == Grid.version)
        return (
            select(QueryAnswer, Grid.public_id, Dataset.timezone, reusable, Dataset.budget_window)
            .join(Grid, Grid.id == QueryAnswer.grid_id)
            .join(Dataset, Dataset.id == QueryAnswer.dataset_id)
        )

    def page(
        self, key_id: int, *, grid_public_id: str | None, limit: int, offset: int
    ) -> tuple[list[StoredRow], int]:
        """One page of the key's answers, newest first, and how many there are."""
        where = [QueryAnswer.key_id == key_id]
        if grid_public_id is not None:
            grid_ids = select(Grid.id).where(Grid.public_id == grid_public_id)
            where.append(QueryAnswer.grid_id.in_(grid_ids))
        total = self.session.scalar(select(func.count(QueryAnswer.id)).where(*where)) or 0
        rows = self.session.execute(
            self._select().where(*where).order_by(QueryAnswer.id.desc()).limit(limit).offset(offset)
        ).all()
        return [StoredRow(*row) for row in rows], int(total)


def stored_answer(row: StoredRow) -> StoredAnswer:
    a = row.answer
    return StoredAnswer(
        query_id=a.public_id,
        dataset_id=a.dataset_id,
        grid_id=row.grid_public_id,
        statistic=a.statistic,
        mechanism=a.mechanism,
        epsilon=float(a.epsilon),
        epoch=a.epoch,
        created_at=format_local(datetime_to_us(a.created_at), get_zone(row.timezone)),
        reusable=bool(row.reusable),
        answer={"privacy_unit": privacy_unit(row), **a.answer, "cached": True},
    )


def list_stored_answers(
    session: Session, key_id: int, *, grid_id: str | None, limit: int, offset: int
) -> StoredAnswerList:
    rows, total = StoredAnswerRepository(session).page(
        key_id, grid_public_id=grid_id, limit=limit, offset=offset
    )
    nxt = offset + len(rows)
    return StoredAnswerList(
        queries=[stored_answer(r) for r in rows],
        total=total,
        limit=limit,
        offset=offset,
        next=nxt if nxt < total else None,
    )


__all__: Sequence[str] = ["StoredAnswerRepository", "list_stored_answers"]
