"""All SQL of coarser grids: rows of ``grids`` with ``slot_minutes > 0`` and a snapshot, so every
``/grids/{id}/…`` path serves them.

A coarser grid's ``version`` is the sum of its fine grids' versions, so it moves exactly when its
records do. Creation is race-safe (``ON CONFLICT DO NOTHING``, read back) and the builder holds
the dataset row ``FOR SHARE`` against uploads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlalchemy import Select, func, select, update
from sqlalchemy.dialects.postgresql import insert

from app.datasets.models import Dataset, Grid, GridSnapshot
from app.datasets.repository import chunks
from app.db.base import Repository


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


_Query = TypeVar("_Query", bound=Select)
_OCCUPANCY_COLUMNS = ("n_users", "n_records", "max_user_records", "version")
_GRID_COLUMNS = ("public_id", "h3_cell", "slot_start", *_OCCUPANCY_COLUMNS)
_SNAPSHOT_COLUMNS = ("version", "user_ids", "counts", "values")


def _columns(row: CoarseRow, names: tuple[str, ...]) -> dict[str, object]:
    return {c: getattr(row, c) for c in names}


def _starting_in(q: _Query, start: datetime | None, end: datetime | None) -> _Query:
    """``q`` narrowed to grids starting in ``[start, end)`` (an open side when None)."""
    if start is not None:
        q = q.where(Grid.slot_start >= start)
    return q if end is None else q.where(Grid.slot_start < end)


class CoarseGridRepository(Repository):
    def share_lock(self, dataset_id: int) -> None:
        """Keep uploads of the dataset out until this transaction ends."""
        self.session.execute(
            select(Dataset.id).where(Dataset.id == dataset_id).with_for_update(read=True)
        )

    def build_lock(self, dataset_id: int, h3_resolution: int, slot_minutes: int) -> None:
        """Wait for the other builders of this level (until the transaction ends)."""
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
        return [FineGrid(*r) for r in self.session.execute(_starting_in(q, start, end))]

    def coarse_grids(
        self, dataset_id: int, slot_minutes: int, start: datetime | None, end: datetime | None
    ) -> list[Grid]:
        q = select(Grid).where(Grid.dataset_id == dataset_id, Grid.slot_minutes == slot_minutes)
        q = _starting_in(q, start, end).execution_options(populate_existing=True)
        return list(self.session.scalars(q))

    def coarse_starts(
        self, dataset_id: int, start: datetime, end: datetime
    ) -> list[tuple[int, str, datetime]]:
        """``(slot_minutes, h3_cell, slot_start)`` of coarser grids in ``[start, end]``."""
        rows = self.session.execute(
            select(Grid.slot_minutes, Grid.h3_cell, Grid.slot_start).where(
                Grid.dataset_id == dataset_id,
                Grid.slot_minutes > 0,
                Grid.slot_start >= start,
                Grid.slot_start <= end,
            )
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def insert_missing(self, dataset_id: int, slot_minutes: int, rows: Sequence[CoarseRow]) -> None:
        """Insert coarser grids not stored yet (a concurrent twin is kept as it is)."""
        key = {"dataset_id": dataset_id, "slot_minutes": slot_minutes}
        for part in chunks(rows):
            stmt = insert(Grid).values([{**_columns(r, _GRID_COLUMNS), **key} for r in part])
            self.session.execute(
                stmt.on_conflict_do_nothing(
                    index_elements=["dataset_id", "slot_minutes", "h3_cell", "slot_start"]
                )
            )

    def refresh(self, grid_id: int, row: CoarseRow) -> None:
        """Bring a stored coarser grid to ``row``'s version (never backwards)."""
        self.session.execute(
            update(Grid)
            .where(Grid.id == grid_id, Grid.version < row.version)
            .values(_columns(row, _OCCUPANCY_COLUMNS))
        )

    def write_snapshots(self, rows: Sequence[tuple[int, CoarseRow]]) -> None:
        """Store ``(grid id, row)`` snapshots, replacing older versions only."""
        for part in chunks(rows):
            stmt = insert(GridSnapshot).values(
                [{"grid_id": gid, **_columns(r, _SNAPSHOT_COLUMNS)} for gid, r in part]
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=["grid_id"],
                set_={c: stmt.excluded[c] for c in _SNAPSHOT_COLUMNS},
                where=GridSnapshot.version < stmt.excluded.version,
            )
            self.session.execute(stmt)
