"""All SQL about the instance row."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.db.base import Repository
from app.instance.models import INSTANCE_ROW, InstanceSettings


class InstanceRepository(Repository):
    def get(self) -> InstanceSettings | None:
        return self.session.scalars(
            select(InstanceSettings).where(InstanceSettings.id == INSTANCE_ROW)
        ).first()

    def add_first(self, fingerprint: str, generated_secret: str | None) -> InstanceSettings:
        """Insert the row, or return the one another process inserted first."""
        try:
            with self.session.begin_nested():
                row = InstanceSettings(
                    id=INSTANCE_ROW,
                    secret_fingerprint=fingerprint,
                    generated_secret=generated_secret,
                )
                self.session.add(row)
            return row
        except IntegrityError:
            existing = self.get()
            if existing is None:
                raise
            return existing
