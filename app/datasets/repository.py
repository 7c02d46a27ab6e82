"""All SQL about datasets, their users, grids, records, snapshots and uploads.

Ingestion's bulk statements are ``app.datasets.bulk``'s (binary ``COPY`` and array
statements); they count what was really inserted, so duplicates are exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.datasets.bulk import BulkWriter
from app.datasets.models import Dataset, DatasetUser, Grid, GridSnapshot, Upload

#: Rows per statement when a list of keys goes into ``IN (...)``.
IN_CHUNK = 500


def _chunks(items: Sequence[Any], size: int = IN_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class DatasetRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, dataset: Dataset) -> Dataset:
        self.session.add(dataset)
        self.session.flush()
        return dataset

    def get(self, dataset_id: int) -> Dataset | None:
        return self.session.get(Dataset, dataset_id)

    def lock(self, dataset_id: int) -> Dataset | None:
        """The dataset row, locked for an upload until the transaction ends.

        ``FOR NO KEY UPDATE`` serialises uploads (and budget resets, which
        take ``FOR UPDATE``) but not queries, which take ``FOR KEY SHARE`` and so keep
        running during a long upload.
        """
        return self.session.scalars(
            select(Dataset)
            .where(Dataset.id == dataset_id)
            .with_for_update(key_share=True)
            .execution_options(populate_existing=True)
        ).first()

    def list_all(self) -> Sequence[Dataset]:
        return self.session.scalars(select(Dataset).order_by(Dataset.id)).all()

    def stats(self, dataset_id: int) -> tuple[int, int, int]:
        """``(n_users with records, n_grids, n_records)`` from the grid summaries."""
        n_grids, n_records = self.session.execute(
            select(func.count(Grid.id), func.coalesce(func.sum(Grid.n_records), 0)).where(
                Grid.dataset_id == dataset_id, Grid.slot_minutes == 0
            )
        ).one()
        n_users = self.session.scalar(
            select(func.count(DatasetUser.id)).where(DatasetUser.dataset_id == dataset_id)
        )
        return int(n_users or 0), int(n_grids), int(n_records)

    # ---------------------------------------------------------------- uploads
    def upload_by_key(self, dataset_id: int, key: str) -> Upload | None:
        return self.session.scalars(
            select(Upload).where(Upload.dataset_id == dataset_id, Upload.idempotency_key == key)
        ).first()

    def add_upload(self, upload: Upload) -> Upload:
        self.session.add(upload)
        self.session.flush()
        return upload


class GridRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def by_public_id(self, public_id: str) -> Grid | None:
        return self.session.scalars(select(Grid).where(Grid.public_id == public_id)).first()

    def page(
        self,
        dataset_id: int,
        *,
        slot_start: datetime | None,
        h3_cell: str | None,
        limit: int,
        offset: int,
        min_users: int = 0,
        sort: str | None = None,
    ) -> tuple[Sequence[Grid], int]:
        """One page of the dataset's own grids in (slot, cell) order or by ``sort``
        (``n_users``, ``slot_start``, ``-`` for descending), and how many match."""
        where = [Grid.dataset_id == dataset_id, Grid.slot_minutes == 0]
        if slot_start is not None:
            where.append(Grid.slot_start == slot_start)
        if h3_cell is not None:
            where.append(Grid.h3_cell == h3_cell)
        if min_users > 0:
            where.append(Grid.n_users >= min_users)
        total = self.session.scalar(select(func.count(Grid.id)).where(*where)) or 0
        order = {
            "n_users": (Grid.n_users.asc(),),
            "-n_users": (Grid.n_users.desc(),),
            "-slot_start": (Grid.slot_start.desc(),),
        }.get(sort or "", ())
        grids = self.session.scalars(
            select(Grid)
            .where(*where)
            .order_by(*order, Grid.slot_start, Grid.h3_cell)
            .limit(limit)
            .offset(offset)
        ).all()
        return grids, int(total)

    def snapshot(self, grid_id: int) -> GridSnapshot | None:
        return self.session.get(GridSnapshot, grid_id)

    def in_slots(
        self, dataset_id: int, slots: Sequence[datetime]
    ) -> list[tuple[int, str, datetime, int, int]]:
        """``(id, h3_cell, slot_start, version, n_records)`` of the grids in these slots."""
        out: list[tuple[int, str, datetime, int, int]] = []
        for part in _chunks(slots):
            rows = self.session.execute(
                select(Grid.id, Grid.h3_cell, Grid.slot_start, Grid.version, Grid.n_records).where(
                    Grid.dataset_id == dataset_id,
                    Grid.slot_start.in_(part),
                    Grid.slot_minutes == 0,  # the dataset's own grids, not coarser ones
                )
            )
            out.extend((r[0], r[1], r[2], r[3], r[4]) for r in rows)
        return out


class IngestRepository:
    """Bulk SQL of ingestion, on the session's own connection (so inside its transaction).

    The statements are :class:`BulkWriter`'s (binary ``COPY`` and array statements).
    Writers to one dataset must hold its lock (:meth:`DatasetRepository.lock`): duplicate
    detection relies on it.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        driver = session.connection().connection.driver_connection
        self.bulk = BulkWriter(driver)

    # ------------------------------------------------------------------ users
    def user_ids(self, dataset_id: int, hashes: Sequence[str]) -> list[int]:
        """``dataset_users.id`` of each keyed hash, creating the missing users."""
        if not hashes:
            return []
        found = self.bulk.user_ids(dataset_id, hashes)
        return [found[h] for h in hashes]

    # ------------------------------------------------------------------ grids
    def allocate_grid_ids(self, n: int) -> list[int]:
        """``n`` fresh grid ids for grids inserted later in this transaction (from the id
        sequence, in blocks)."""
        return [] if n <= 0 else self.bulk.allocate_grid_ids(n)

    def insert_grids(
        self, dataset_id: int, rows: Sequence[tuple[int, str, str, int, int, int, int, int]]
    ) -> None:
        """Insert grids ``(id, public_id, h3_cell, slot_start µs, n_users, n_records,
        max_user_records, version)``."""
        if rows:
            self.bulk.insert_grids(dataset_id, rows)

    def update_grids(self, rows: Sequence[tuple[int, int, int, int, int]]) -> None:
        """Set ``(id, n_users, n_records, max_user_records, version)`` of grids."""
        if rows:
            self.bulk.update_grids(rows)

    def write_snapshots(
        self, rows: Sequence[tuple[int, int, bytes, bytes, bytes]], *, replace: bool
    ) -> None:
        """Store snapshots ``(grid_id, version, user_ids, counts, values)``; ``replace``
        overwrites existing ones (grids that had records before)."""
        if not rows:
            return
        conflict = (
            " ON CONFLICT (grid_id) DO UPDATE SET version = excluded.version, "
            "user_ids = excluded.user_ids, counts = excluded.counts, "
            '"values" = excluded."values"'
            if replace
            else ""
        )
        self.bulk.write_snapshots(rows, conflict=conflict)

    # ---------------------------------------------------------------- records
    def insert_records(
        self,
        dataset_id: int,
        grid_ids: np.ndarray,
        user_ids: np.ndarray,
        ts_us: np.ndarray,
        values: np.ndarray,
        check: np.ndarray | None = None,
    ) -> int:
        """Store records whose (user, ts) is not stored yet; returns how many were inserted.

        The rows must not repeat a (user, ts) among themselves (see
        ``first_occurrences``); they are best given in (user, ts) order. ``check``
        (bool per row, default all) marks the rows that may repeat a stored one; the
        others are inserted without looking (the unique constraint still guards them).
        """
        if len(grid_ids) == 0:
            return 0
        return self.bulk.insert_records(dataset_id, grid_ids, user_ids, ts_us, values, check)

    def latest_ts(self, dataset_id: int, user_ids: Sequence[int]) -> list[int | None]:
        """Per user, the latest stored record time (µs), or None (one index probe each)."""
        return self.bulk.latest_ts(dataset_id, user_ids) if user_ids else []

    def read_grids(self, grid_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(grid_id, user_id, value)`` arrays of these grids' records, ordered by grid,
        user (ascending ``dataset_users.id``), timestamp, record id."""
        ids = sorted(int(g) for g in grid_ids)
        if not ids:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, np.empty(0, dtype=np.float64)
        return self.bulk.read_grids(ids)
