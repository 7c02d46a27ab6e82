"""All SQL of coarser grids (H3 parents and/or longer slots, made on demand).

A coarser grid is a row of ``grids`` with ``slot_minutes > 0`` and a snapshot in
``grid_snapshots`` like any grid, so every ``/grids/{id}/…`` path serves it
unchanged. Its ``version`` is the sum of the versions of the dataset's own
grids it covers: every upload that changes one of them raises the sum, so the
version moves exactly when the coarser grid's records do.

Creation is race-safe: rows are inserted with ``ON CONFLICT DO NOTHING`` on the
unique key and read back; the builder holds the dataset row ``FOR SHARE``
(uploads take ``FOR NO KEY UPDATE``, so none can commit between reading the
records and writing the grid).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.datasets.models import Dataset, Grid, GridSnapshot
from app.datasets.repository import GridRepository, RecordArrays, copy_records

IN_CHUNK = 500


@dataclass(frozen=True)
class FineGrid:
    id: int
    h3_cell: str
    slot_start: datetime
    version: int


@dataclass(frozen=True)
class CoarseRow:
    """A coarser grid to write: its key, occupancy, version and snapshot buffers."""

    h3_cell: str
    slot_start: datetime
    public_id: str
    n_users: int
    n_records: int
    max_user_records: int
    version: int
    user_ids: bytes
    counts: bytes
    values: bytes


class CoarseGridRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def share_lock(self, dataset_id: int) -> None:
        """Keep uploads of the dataset out until this transaction ends."""
        self.session.execute(
            select(Dataset.id).where(Dataset.id == dataset_id).with_for_update(read=True)
        )

    def build_lock(self, dataset_id: int, h3_resolution: int, slot_minutes: int) -> None:
        """Wait for the other builders of this level of the dataset (until this
        transaction ends)."""
        self.session.execute(
            select(func.pg_advisory_xact_lock(dataset_id, h3_resolution << 16 | slot_minutes))
        )

    def fine_grids(
        self, dataset_id: int, start: datetime | None, end: datetime | None
    ) -> list[FineGrid]:
        """The dataset's own grids with records, starting in ``[start, end)`` if given."""
        q = select(Grid.id, Grid.h3_cell, Grid.slot_start, Grid.version).where(
            Grid.dataset_id == dataset_id, Grid.slot_minutes == 0, Grid.n_records > 0
        )
        if start is not None:
            q = q.where(Grid.slot_start >= start)
        if end is not None:
            q = q.where(Grid.slot_start < end)
        return [FineGrid(*r) for r in self.session.execute(q)]

    def coarse_grids(
        self, dataset_id: int, slot_minutes: int, start: datetime | None, end: datetime | None
    ) -> list[Grid]:
        q = select(Grid).where(Grid.dataset_id == dataset_id, Grid.slot_minutes == slot_minutes)
        if start is not None:
            q = q.where(Grid.slot_start >= start)
        if end is not None:
            q = q.where(Grid.slot_start < end)
        return list(self.session.scalars(q.execution_options(populate_existing=True)))

    def coarse_starts(
        self, dataset_id: int, start: datetime, end: datetime
    ) -> list[tuple[int, str, datetime]]:
        """``(slot_minutes, h3_cell, slot_start)`` of the coarser grids starting in
        ``[start, end]``."""
        rows = self.session.execute(
            select(Grid.slot_minutes, Grid.h3_cell, Grid.slot_start).where(
                Grid.dataset_id == dataset_id,
                Grid.slot_minutes > 0,
                Grid.slot_start >= start,
                Grid.slot_start <= end,
            )
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def snapshot_rows(self, grid_ids: Sequence[int]) -> list[tuple[int, int, bytes, bytes, bytes]]:
        return GridRepository(self.session).snapshot_rows(grid_ids)

    def grid_users(self, grid_ids: Sequence[int]) -> dict[int, tuple[int, np.ndarray]]:
        """``{grid_id: (version, user ids)}`` of these grids' snapshots."""
        return GridRepository(self.session).snapshot_users(grid_ids)

    def records(
        self,
        dataset_id: int,
        grid_ids: Sequence[int],
        user_ids: Sequence[int] | None,
        start_us: int,
        end_us: int,
    ) -> RecordArrays:
        """These grids' records (in no order), given all their users and time range."""
        return copy_records(self.session, dataset_id, grid_ids, user_ids, start_us, end_us)

    def insert_missing(self, dataset_id: int, slot_minutes: int, rows: Sequence[CoarseRow]) -> None:
        """Insert coarser grids not stored yet (a concurrent twin is kept as it is)."""
        for i in range(0, len(rows), IN_CHUNK):
            part = rows[i : i + IN_CHUNK]
            stmt = (
                insert(Grid)
                .values(
                    [
                        {
                            "public_id": r.public_id,
                            "dataset_id": dataset_id,
                            "h3_cell": r.h3_cell,
                            "slot_start": r.slot_start,
                            "n_users": r.n_users,
                            "n_records": r.n_records,
                            "max_user_records": r.max_user_records,
                            "version": r.version,
                            "slot_minutes": slot_minutes,
                        }
                        for r in part
                    ]
                )
                .on_conflict_do_nothing(
                    index_elements=["dataset_id", "slot_minutes", "h3_cell", "slot_start"]
                )
            )
            self.session.execute(stmt)

    def refresh(self, grid_id: int, row: CoarseRow) -> None:
        """Bring a stored coarser grid to ``row``'s version (never backwards)."""
        self.session.execute(
            update(Grid)
            .where(Grid.id == grid_id, Grid.version < row.version)
            .values(
                n_users=row.n_users,
                n_records=row.n_records,
                max_user_records=row.max_user_records,
                version=row.version,
            )
        )

    def write_snapshots(self, rows: Sequence[tuple[int, CoarseRow]]) -> None:
        """Store ``(grid id, row)`` snapshots, replacing older versions only."""
        for i in range(0, len(rows), IN_CHUNK):
            part = rows[i : i + IN_CHUNK]
            stmt = insert(GridSnapshot).values(
                [
                    {
                        "grid_id": gid,
                        "version": r.version,
                        "user_ids": r.user_ids,
                        "counts": r.counts,
                        "values": r.values,
                    }
                    for gid, r in part
                ]
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=["grid_id"],
                set_={
                    "version": stmt.excluded.version,
                    "user_ids": stmt.excluded.user_ids,
                    "counts": stmt.excluded.counts,
                    "values": stmt.excluded["values"],
                },
                where=GridSnapshot.version < stmt.excluded.version,
            )
            self.session.execute(stmt)
