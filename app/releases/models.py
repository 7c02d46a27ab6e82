from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, Epsilon, UTCDateTime, utcnow


class SlotRelease(Base):
    """A stored release of one timeslot, with the kept sets of its plan.

    ``kept`` maps each grid's public id to ``{"version": v, "users": {user_id: Γ}}``
    so later single-grid queries can reuse the plan (``plan=<release id>``).
    """

    __tablename__ = "slot_releases"
    __table_args__ = (
        UniqueConstraint("dataset_id", "epoch", "fingerprint"),
        # GET /datasets/{id}/releases, newest first (migration 0008)
        Index("ix_slot_releases_dataset_id_created_at", "dataset_id", "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    public_id: Mapped[str] = mapped_column(String(32), unique=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    slot_start: Mapped[datetime] = mapped_column(UTCDateTime())
    fingerprint: Mapped[str] = mapped_column(String(64))
    epsilon: Mapped[Decimal] = mapped_column(Epsilon)
    answer: Mapped[dict[str, Any]] = mapped_column(JSON)
    kept: Mapped[dict[str, Any]] = mapped_column(JSON)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
