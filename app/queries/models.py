from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, Epsilon, UTCDateTime, utcnow


class QueryAnswer(Base):
    """A released answer; the same query in the same epoch is served from here."""

    __tablename__ = "query_answers"
    __table_args__ = (
        UniqueConstraint("grid_id", "epoch", "grid_version", "fingerprint"),
        # GET /queries: a key's answers, newest first (migration 0007)
        Index("ix_query_answers_key_id_id", "key_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    public_id: Mapped[str] = mapped_column(String(32), unique=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    grid_id: Mapped[int] = mapped_column(ForeignKey("grids.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    grid_version: Mapped[int] = mapped_column(Integer)
    fingerprint: Mapped[str] = mapped_column(String(64))
    statistic: Mapped[str] = mapped_column(String(16))
    mechanism: Mapped[str] = mapped_column(String(32))
    epsilon: Mapped[Decimal] = mapped_column(Epsilon)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    answer: Mapped[dict[str, Any]] = mapped_column(JSON)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
