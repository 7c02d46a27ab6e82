"""All SQL about datasets, their grids, snapshots and uploads, and the reading of a
grid's records by binary ``COPY`` (:func:`copy_records`). Ingestion's bulk writes are
``app.uploads.repository``'s."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

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

        ``FOR NO KEY UPDATE`` serialises uploads (and budget resets, which take it
        too) but not queries, which take ``FOR KEY SHARE`` and so keep
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


_FETCH_ROW = np.dtype(
    [
        ("n", ">i2"),
        ("l1", ">i4"), ("grid", ">i8"),
        ("l2", ">i4"), ("user", ">i8"),
        ("l3", ">i4"), ("value", ">f8"),
    ]
)  # fmt: skip


def copy_records(
    session: Session, grid_ids: Sequence[int], order_by: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(grid_id, user_id, value)`` arrays of the records of grids ``grid_ids`` in
    ``order_by`` order (a fixed column list of the caller's), by binary ``COPY`` on the
    session's connection."""
    ids = sorted({int(g) for g in grid_ids})
    if not ids:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty(0, dtype=np.float64)
    driver: Any = session.connection().connection.driver_connection
    id_list = "{" + ",".join(map(str, ids)) + "}"  # integers only: safe to inline
    sql = (
        "COPY (SELECT grid_id::bigint, user_id::bigint, value::float8 FROM records "  # noqa: S608
        f"WHERE grid_id = ANY('{id_list}'::bigint[]) "
        f"ORDER BY {order_by}) TO STDOUT (FORMAT BINARY)"
    )
    buf = bytearray()
    with driver.cursor() as cur, cur.copy(sql) as copy:
        for block in copy:
            buf += block
    ext = struct.unpack(">i", buf[15:19])[0]
    body = memoryview(buf)[19 + ext : len(buf) - 2]
    rows = np.frombuffer(body, dtype=_FETCH_ROW)
    return (
        rows["grid"].astype(np.int64),
        rows["user"].astype(np.int64),
        rows["value"].astype(np.float64),
    )
