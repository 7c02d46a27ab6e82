"""All SQL of slot releases."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.datasets.models import Grid
from app.releases.models import SlotRelease


class ReleaseRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def grids_in_slot(self, dataset_id: int, slot_start: datetime) -> list[Grid]:
        return list(
            self.session.scalars(
                select(Grid)
                .where(Grid.dataset_id == dataset_id, Grid.slot_start == slot_start)
                .where(Grid.n_records > 0, Grid.slot_minutes == 0)
                .order_by(Grid.h3_cell)
            )
        )

    def find(self, dataset_id: int, epoch: int, fingerprint: str) -> SlotRelease | None:
        return self.session.scalars(
            select(SlotRelease).where(
                SlotRelease.dataset_id == dataset_id,
                SlotRelease.epoch == epoch,
                SlotRelease.fingerprint == fingerprint,
            )
        ).first()

    def by_public_id(self, public_id: str) -> SlotRelease | None:
        return self.session.scalars(
            select(SlotRelease).where(SlotRelease.public_id == public_id)
        ).first()

    def add(self, release: SlotRelease) -> SlotRelease:
        self.session.add(release)
        self.session.flush()
        return release
