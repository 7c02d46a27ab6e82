from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, Epsilon, UTCDateTime, utcnow


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    value_bound: Mapped[float] = mapped_column(Float)
    h3_resolution: Mapped[int] = mapped_column(Integer)
    timeslot_minutes: Mapped[int] = mapped_column(Integer)
    timezone: Mapped[str] = mapped_column(String(64))
    budget_per_user: Mapped[Decimal] = mapped_column(Epsilon)
    max_epsilon_per_query: Mapped[Decimal] = mapped_column(Epsilon)
    on_exhausted: Mapped[str] = mapped_column(String(16))
    # value-based upload filters (drop_zero, out_of_range=reject) allowed: SECURITY.md
    value_filters_public: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false()
    )
    # "none", "day", "week" or "month": budget_per_user per user and window
    # (app.time.budget_windows)
    budget_window: Mapped[str] = mapped_column(String(8), default="none", server_default="none")
    # echoed as ``unit`` in every statistic answer, export and map (migration 0015)
    value_unit: Mapped[str | None] = mapped_column(String(40), nullable=True)
    epoch: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # raw records older than this many days are dropped, a month at a time, once their
    # grids' snapshots are stored (app.uploads.retention); null: kept for ever
    raw_retention_days: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # raw records before this instant were dropped (null: none); their grids are final
    raw_kept_from: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class DatasetUser(Base):
    """A data subject, known only by the keyed hash (HMAC-SHA256) of its identifier."""

    __tablename__ = "dataset_users"
    __table_args__ = (UniqueConstraint("dataset_id", "user_hash"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    user_hash: Mapped[str] = mapped_column(String(64))


class Grid(Base):
    """One H3 cell × one timeslot, with its public occupancy; ``slot_minutes`` is 0 for the
    dataset's own grids, else a coarser grid's slot length."""

    __tablename__ = "grids"
    __table_args__ = (
        UniqueConstraint(
            "dataset_id",
            "slot_minutes",
            "h3_cell",
            "slot_start",
            name="uq_grids_dataset_id_slot_minutes",
        ),
        Index("ix_grids_dataset_slot", "dataset_id", "slot_start"),
        # the listings' orders (migration 0016); the entries hold what is filtered on
        Index(
            "ix_grids_listing", "dataset_id", "slot_minutes", "slot_start", "h3_cell",
            postgresql_include=["n_users", "n_records", "id"],
        ),
        Index(
            "ix_grids_listing_desc", "dataset_id", "slot_minutes", text("slot_start DESC"),
            "h3_cell", postgresql_include=["n_users", "id"],
        ),
        Index(
            "ix_grids_listing_users", "dataset_id", "slot_minutes", "n_users", "slot_start",
            "h3_cell", postgresql_include=["id"],
        ),
        Index(
            "ix_grids_listing_users_desc", "dataset_id", "slot_minutes", text("n_users DESC"),
            "slot_start", "h3_cell", postgresql_include=["id"],
        ),
    )  # fmt: skip

    id: Mapped[int] = mapped_column(primary_key=True)
    public_id: Mapped[str] = mapped_column(String(32), unique=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    h3_cell: Mapped[str] = mapped_column(String(16))
    slot_start: Mapped[datetime] = mapped_column(UTCDateTime())
    n_users: Mapped[int] = mapped_column(Integer, default=0)
    n_records: Mapped[int] = mapped_column(Integer, default=0)
    max_user_records: Mapped[int] = mapped_column(Integer, default=0)
    version: Mapped[int] = mapped_column(Integer, default=0)
    slot_minutes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Record(Base):
    """One accepted raw record (value clamped to [0, U]), keyed by user and time. No foreign keys,
    surrogate id or grid index (each multiplied insert cost): ingestion, the only writer, resolves
    ids under the dataset lock. Partitioned by dataset and month (``app.datasets.partitions``)."""

    __tablename__ = "records"
    # then by month (app.datasets.partitions, migration 0017)
    __table_args__ = ({"postgresql_partition_by": "LIST (dataset_id)"},)

    dataset_id: Mapped[int] = mapped_column(Integer, primary_key=True)  # datasets.id
    user_id: Mapped[int] = mapped_column(Integer, primary_key=True)  # dataset_users.id
    ts: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    grid_id: Mapped[int] = mapped_column(Integer)  # grids.id
    value: Mapped[float] = mapped_column(Float)


class GridSnapshot(Base):
    """The engine's input for one grid version: little-endian ``user_ids`` and ``counts`` (int64)
    and ``values`` (float64, by user then time)."""

    __tablename__ = "grid_snapshots"

    grid_id: Mapped[int] = mapped_column(
        ForeignKey("grids.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer)
    user_ids: Mapped[bytes] = mapped_column(LargeBinary)
    counts: Mapped[bytes] = mapped_column(LargeBinary)
    values: Mapped[bytes] = mapped_column(LargeBinary)


class Upload(Base):
    """One completed upload and its answer (for ``Idempotency-Key`` replays)."""

    __tablename__ = "uploads"
    __table_args__ = (UniqueConstraint("dataset_id", "idempotency_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # what the first request was (app.idempotency.service.request_hash); null before 0005
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    response: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
