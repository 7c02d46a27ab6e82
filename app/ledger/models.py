from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import JSON, Date, ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, Epsilon, UTCDateTime, utcnow
from app.time.budget_windows import ALL_TIME

#: ``window_start`` of a dataset without budget windows (``app.time.budget_windows.ALL_TIME``).
ALL_TIME_SQL = text("'0001-01-01'")


class BudgetAccount(Base):
    """Running total of epsilon spent by one user of one dataset in one epoch and one
    budget window (named by its first local date; ``0001-01-01`` without windows)."""

    __tablename__ = "budget_accounts"

    # no foreign keys (a trigger per inserted row): inserts hold the dataset's row, and a trigger
    # on ``datasets`` deletes its accounts (docs/math.md §10.6)
    dataset_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    window_start: Mapped[date] = mapped_column(
        Date, primary_key=True, default=ALL_TIME, server_default=ALL_TIME_SQL
    )
    user_id: Mapped[int] = mapped_column(Integer, primary_key=True)  # dataset_users.id
    spent: Mapped[Decimal] = mapped_column(Epsilon, default=Decimal(0))


class LedgerEntry(Base):
    """One charge: ``epsilon`` to each of ``users`` (append-only; never updated)."""

    __tablename__ = "ledger_entries"
    __table_args__ = (Index("ix_ledger_entries_dataset_epoch", "dataset_id", "epoch"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    window_start: Mapped[date] = mapped_column(Date, default=ALL_TIME, server_default=ALL_TIME_SQL)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id"))
    kind: Mapped[str] = mapped_column(String(16))  # "query" or "release"
    reference_id: Mapped[int] = mapped_column(Integer)  # query answer id or release id
    grid_id: Mapped[int | None] = mapped_column(ForeignKey("grids.id"), nullable=True)
    epsilon: Mapped[Decimal] = mapped_column(Epsilon)
    n_users: Mapped[int] = mapped_column(Integer)
    users: Mapped[list[int]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class BudgetReset(Base):
    """Audit record of a budget reset (append-only)."""

    __tablename__ = "budget_resets"

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    from_epoch: Mapped[int] = mapped_column(Integer)
    to_epoch: Mapped[int] = mapped_column(Integer)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id"))
    reason: Mapped[str] = mapped_column(String(2000))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
