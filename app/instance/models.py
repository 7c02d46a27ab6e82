from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow

INSTANCE_ROW = 1


class InstanceSettings(Base):
    """The one row (``id = 1``) saying which hashing secret this database belongs to.

    ``secret_fingerprint`` is HMAC-SHA256 of a fixed label under the secret: it shows
    whether a secret is the same one without revealing it. ``generated_secret`` holds
    the secret itself only when dpgate generated it and had nowhere else to keep it
    (neither ``DPGATE_SECRET_KEY`` nor ``DPGATE_SECRET_FILE`` set).
    """

    __tablename__ = "dpgate_instance"

    id: Mapped[int] = mapped_column(primary_key=True)
    secret_fingerprint: Mapped[str] = mapped_column(String(64))
    generated_secret: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
