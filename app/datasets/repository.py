"""All SQL about datasets, grids, snapshots and uploads, and the reading of grids' records
(:func:`copy_records`). Ingestion's bulk writes are ``app.uploads.repository``'s."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from psycopg import sql
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.datasets.models import Dataset, DatasetUser, Grid, GridSnapshot, Upload
from app.datasets.partitions import dataset_table
from app.db.base import Repository
from app.db.unit import binary_rows, int_array
from app.time.slots import us_to_datetime

#: The distinct slot starts of one dataset and slot length (and resolution), one index
#: probe each: a recursive skip scan on ``ix_grids_listing`` (Postgres has no loose index
#: scan of its own).
_SLOT_STARTS = """
WITH RECURSIVE s(t) AS (
  (SELECT slot_start FROM grids WHERE dataset_id = :d AND slot_minutes = :m
     AND (CASE WHEN :m = 0 THEN n_records > 0 ELSE substr(h3_cell, 2, 1) = :r END)
   ORDER BY slot_start LIMIT 1)
  UNION ALL
  SELECT (SELECT slot_start FROM grids WHERE dataset_id = :d AND slot_minutes = :m
            AND (CASE WHEN :m = 0 THEN n_records > 0 ELSE substr(h3_cell, 2, 1) = :r END)
            AND slot_start > s.t ORDER BY slot_start LIMIT 1)
  FROM s WHERE s.t IS NOT NULL
)
SELECT t FROM s WHERE t IS NOT NULL ORDER BY t
"""

#: Rows per statement when a list of keys goes into ``IN (...)``.
IN_CHUNK = 500


def chunks(items: Sequence[Any], size: int = IN_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class DatasetRepository(Repository):
    def get(self, dataset_id: int) -> Dataset | None:
        return self.session.get(Dataset, dataset_id)

    def lock(self, dataset_id: int, *, shared: bool = False) -> Dataset | None:
        """The dataset row until the transaction ends: ``FOR NO KEY UPDATE`` serialises uploads
        and resets, not queries and releases, which lock it ``shared`` (``FOR KEY SHARE``)."""
        return self.session.scalars(
            select(Dataset)
            .where(Dataset.id == dataset_id)
            .with_for_update(read=shared, key_share=True)
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


class GridRepository(Repository):
    def by_public_id(self, public_id: str) -> Grid | None:
        return self.session.scalars(select(Grid).where(Grid.public_id == public_id)).first()

    def page(
        self,
        dataset_id: int,
        *,
        level: tuple[int, int] | None = None,
        slot_start: datetime | None,
        h3_cell: str | None,
        limit: int,
        offset: int,
        min_users: int = 0,
        sort: str | None = None,
    ) -> tuple[Sequence[Grid], bool]:
        """One page of the dataset's own grids, or of the stored coarser grids of ``level`` ``(h3
        resolution, slot minutes)``, in (slot, cell) order or by ``sort``, and whether more
        follow; the page's ids are found on a covering index (migration 0016), so an ``offset``
        skips index entries only."""
        minutes = 0 if level is None else level[1]
        where = [Grid.dataset_id == dataset_id, Grid.slot_minutes == minutes]
        if level is not None:  # an H3 cell's second hex digit is its resolution
            where.append(func.substr(Grid.h3_cell, 2, 1) == f"{level[0]:x}")
        if slot_start is not None:
            where.append(Grid.slot_start == slot_start)
        if h3_cell is not None:
            where.append(Grid.h3_cell == h3_cell)
        if min_users > 0:
            where.append(Grid.n_users >= min_users)
        order = {
            "n_users": (Grid.n_users.asc(),),
            "-n_users": (Grid.n_users.desc(),),
            "-slot_start": (Grid.slot_start.desc(),),
        }.get(sort or "", ())
        order = (*order, Grid.slot_start, Grid.h3_cell)
        ids = select(Grid.id).where(*where).order_by(*order).limit(limit + 1).offset(offset)
        grids = self.session.scalars(
            select(Grid).where(Grid.id.in_(ids.scalar_subquery())).order_by(*order)
        ).all()
        return grids[:limit], len(grids) > limit

    def slot_starts(
        self, dataset_id: int, slot_minutes: int, h3_resolution: int | None = None
    ) -> list[datetime]:
        """The distinct slot starts of the dataset's grids of one slot length (0: its own, with
        records) and H3 resolution, one index probe per slot."""
        rows = self.session.execute(
            text(_SLOT_STARTS),
            {"d": dataset_id, "m": slot_minutes, "r": f"{h3_resolution or 0:x}"},
        )
        return [r[0].astimezone(UTC) for r in rows]

    def snapshot(self, grid_id: int) -> GridSnapshot | None:
        return self.session.get(GridSnapshot, grid_id)

    def snapshot_rows(self, grid_ids: Sequence[int]) -> list[tuple[int, int, bytes, bytes, bytes]]:
        """``(grid_id, version, user_ids, counts, values)`` of these grids' snapshots."""
        rows = self._snapshots(("grid_id", "version", "user_ids", "counts", "values"), grid_ids)
        return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def snapshot_users(self, grid_ids: Sequence[int]) -> dict[int, tuple[int, np.ndarray]]:
        """``{grid_id: (version, user ids)}`` of these grids' snapshots (users with records)."""
        rows = self._snapshots(("grid_id", "version", "user_ids"), grid_ids)
        return {r[0]: (r[1], np.frombuffer(r[2], dtype="<i8").astype(np.int64)) for r in rows}

    def _snapshots(
        self, columns: tuple[str, ...], grid_ids: Sequence[int]
    ) -> list[tuple[Any, ...]]:
        """``columns`` of these grids' snapshots in one statement, fetched in binary (hex text of
        10⁵ snapshots took seconds to decode)."""
        query = sql.SQL("SELECT {} FROM {} WHERE grid_id = ANY(%s)").format(
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.Identifier(GridSnapshot.__tablename__),
        )
        return binary_rows(self.session, query, ([int(g) for g in grid_ids],))

    def in_slots(
        self, dataset_id: int, slots: Sequence[datetime]
    ) -> list[tuple[int, str, datetime, int, int]]:
        """``(id, h3_cell, slot_start, version, n_records)`` of the grids in these slots."""
        out: list[tuple[int, str, datetime, int, int]] = []
        for part in chunks(slots):
            rows = self.session.execute(
                select(Grid.id, Grid.h3_cell, Grid.slot_start, Grid.version, Grid.n_records).where(
                    Grid.dataset_id == dataset_id,
                    Grid.slot_start.in_(part),
                    Grid.slot_minutes == 0,  # the dataset's own grids, not coarser ones
                )
            )
            out.extend((r[0], r[1], r[2], r[3], r[4]) for r in rows)
        return out


_FETCH_ROW = np.dtype([("grid", ">i4"), ("user", ">i4"), ("ts", ">i8"), ("value", ">f8")])
#: Microseconds from the Unix epoch to Postgres' (2000-01-01), the origin of binary times.
PG_EPOCH_OFFSET_US = 946_684_800_000_000


@dataclass(frozen=True)
class RecordArrays:
    """Records as arrays: grid and user ids, UTC µs, values (row ``i`` across all four)."""

    grid_ids: np.ndarray
    user_ids: np.ndarray
    ts_us: np.ndarray
    values: np.ndarray

    def sorted(self) -> RecordArrays:
        """In (grid, user, time) order."""
        order = np.lexsort((self.ts_us, self.user_ids, self.grid_ids))
        return RecordArrays(
            self.grid_ids[order], self.user_ids[order], self.ts_us[order], self.values[order]
        )


_EMPTY = np.empty(0, dtype=np.int64)
_NO_RECORDS = RecordArrays(_EMPTY, _EMPTY, _EMPTY, np.empty(0, dtype=np.float64))


def snapshot_records(snapshots: Iterable[tuple[int, bytes, bytes, bytes]]) -> RecordArrays:
    """The records held by snapshots ``(grid id, user_ids, counts, values)``, in the order given
    and each snapshot's own (``ts_us`` is that order, not times)."""
    cols = []
    for grid_id, users, counts, values in snapshots:
        vals = np.frombuffer(values, dtype="<f8").astype(np.float64)
        per = np.repeat(np.frombuffer(users, dtype="<i8"), np.frombuffer(counts, dtype="<i8"))
        cols.append((np.full(vals.size, grid_id, dtype=np.int64), per.astype(np.int64), vals))
    if not cols:
        return _NO_RECORDS
    grid_ids, user_ids, vals = (np.concatenate(c) for c in zip(*cols, strict=True))
    return RecordArrays(grid_ids, user_ids, np.arange(grid_ids.size, dtype=np.int64), vals)


def copy_records(
    session: Session,
    dataset_id: int,
    grid_ids: Iterable[int],
    user_ids: Iterable[int] | None,
    start_us: int,
    end_us: int,
) -> RecordArrays:
    """The records of ``grid_ids`` (in no order), given all their users and a time range
    ``[start_us, end_us)`` holding them, read by the records' key one range per user
    (``user_ids=None``: the dataset's whole key range)."""
    grids = sorted({int(g) for g in grid_ids})
    users = None if user_ids is None else sorted({int(u) for u in user_ids})
    if not grids or users == [] or start_us >= end_us:
        return _NO_RECORDS
    # Integers and our own UTC datetimes only: safe to inline. One range scan of the key
    # per user, whatever the statistics; one bytea of packed rows back (a row per COPY
    # message costs more to receive than the reading itself).
    per_user = "" if users is None else "AND user_id = u.id "
    sql = (
        "SELECT string_agg(int4send(r.grid_id) || int4send(r.user_id) || "  # noqa: S608
        "timestamptz_send(r.ts) || float8send(r.value), ''::bytea) "
        f"FROM unnest('{int_array(users or [0])}'::int[]) AS u(id) CROSS JOIN LATERAL "
        f"(SELECT * FROM {dataset_table(dataset_id)} WHERE dataset_id = {int(dataset_id)} "
        f"{per_user}"
        f"AND ts >= '{us_to_datetime(start_us).isoformat()}' "
        f"AND ts < '{us_to_datetime(end_us).isoformat()}' OFFSET 0) AS r "
        f"WHERE r.grid_id = ANY('{int_array(grids)}'::int[])"
    )
    packed = session.connection().exec_driver_sql(sql).scalar()
    rows = np.frombuffer(packed or b"", dtype=_FETCH_ROW)
    return RecordArrays(
        rows["grid"].astype(np.int64),
        rows["user"].astype(np.int64),
        rows["ts"].astype(np.int64) + PG_EPOCH_OFFSET_US,
        rows["value"].astype(np.float64),
    )
