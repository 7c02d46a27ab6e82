"""All SQL of stored query answers."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.datasets.models import Dataset, Grid
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

    def grid_and_dataset(self, grid_public_id: str) -> tuple[Grid, Dataset] | None:
        """A grid and its dataset in one round trip (no lock)."""
        row = self.session.execute(
            select(Grid, Dataset)
            .join(Dataset, Dataset.id == Grid.dataset_id)
            .where(Grid.public_id == grid_public_id)
        ).first()
        return None if row is None else (row[0], row[1])

    def add(self, answer: QueryAnswer) -> QueryAnswer:
        self.session.add(answer)
        self.session.flush()
        return answer
