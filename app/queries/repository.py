"""All SQL of stored query answers."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.queries.models import QueryAnswer


class AnswerRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def find(self, grid_id: int, epoch: int, fingerprint: str) -> QueryAnswer | None:
        return self.session.scalars(
            select(QueryAnswer).where(
                QueryAnswer.grid_id == grid_id,
                QueryAnswer.epoch == epoch,
                QueryAnswer.fingerprint == fingerprint,
            )
        ).first()

    def add(self, answer: QueryAnswer) -> QueryAnswer:
        self.session.add(answer)
        self.session.flush()
        return answer
