from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow

INSTANCE_ROW = 1


class InstanceSettings(Base):
    """The one row (``id = 1``) naming this database's hashing secret by its keyed fingerprint;
    ``generated_secret`` holds the secret only when dpgate generated it and had nowhere else to
    keep it."""

    __tablename__ = "dpgate_instance"

    id: Mapped[int] = mapped_column(primary_key=True)
    secret_fingerprint: Mapped[str] = mapped_column(String(64))
    generated_secret: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
