from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, Epsilon, UTCDateTime, utcnow

ROLES = ("admin", "analyst", "viewer")  # a viewer reads and never spends


class ApiKey(Base):
    """An API key, stored only as the SHA-256 of its secret."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    epsilon_quota: Mapped[Decimal | None] = mapped_column(Epsilon, nullable=True)
    # spend counted against ``epsilon_quota`` (keys without a quota: see the ledger entries)
    epsilon_spent: Mapped[Decimal] = mapped_column(Epsilon, default=Decimal(0))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
