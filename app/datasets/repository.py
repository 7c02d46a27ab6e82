"""All SQL about datasets, their users, grids, records, snapshots and uploads.

Bulk paths differ by dialect: on Postgres records go through binary ``COPY``
into a temporary staging table and one ``INSERT ... SELECT ... WHERE NOT EXISTS``
(an anti-join on the unique key: cheaper than ``ON CONFLICT`` and exact because
the dataset lock keeps other writers out); on SQLite through ``executemany`` of
``INSERT ... ON CONFLICT DO NOTHING``. Both count what was really inserted, so
duplicates are exact. Grids and snapshots are written with ``COPY`` / array
statements on Postgres and ``executemany`` on SQLite.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.datasets.models import Dataset, DatasetUser, Grid, GridSnapshot, Upload

#: Rows per statement when a list of keys goes into ``IN (...)``.
IN_CHUNK = 500
#: Grid ids drawn from the Postgres sequence per round trip (unused ones are a harmless gap).
ID_BLOCK = 4096
#: Microseconds between the Unix epoch and Postgres' epoch (2000-01-01).
PG_EPOCH_OFFSET_US = 946_684_800_000_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_PG_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_PG_COPY_TRAILER = struct.pack(">h", -1)
_PG_STAGE_ROW = np.dtype(
    [
        ("n", ">i2"),
        ("l1", ">i4"), ("grid", ">i8"),
        ("l2", ">i4"), ("user", ">i8"),
        ("l3", ">i4"), ("ts", ">i8"),
        ("l4", ">i4"), ("value", ">f8"),
        ("l5", ">i4"), ("check", "u1"),
    ]
)  # fmt: skip
_PG_FETCH_ROW = np.dtype(
    [
        ("n", ">i2"),
        ("l1", ">i4"), ("grid", ">i8"),
        ("l2", ">i4"), ("user", ">i8"),
        ("l3", ">i4"), ("value", ">f8"),
    ]
)  # fmt: skip


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

        Postgres: ``FOR NO KEY UPDATE`` serialises uploads (and budget resets, which
        take ``FOR UPDATE``) but not queries, which take ``FOR KEY SHARE`` and so keep
        running during a long upload. SQLite transactions already hold the write lock.
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


def sqlite_datetime_text(us: np.ndarray) -> list[str]:
    """UTC microseconds as the text SQLAlchemy's SQLite ``DateTime`` stores
    (``YYYY-MM-DD HH:MM:SS.ffffff``), so raw and ORM writes compare equal."""
    text = np.datetime_as_string(np.asarray(us, dtype=np.int64).astype("datetime64[us]"), unit="us")
    return np.char.replace(text, "T", " ").tolist()


class IngestRepository:
    """Bulk SQL of ingestion, on the session's own connection (so inside its transaction).

    Postgres: binary ``COPY`` into a temporary staging table and array (``unnest``)
    statements. SQLite: ``executemany`` through the driver. Writers to one dataset
    must hold its lock (:meth:`DatasetRepository.lock`): duplicate detection
    relies on it.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.dialect = session.get_bind().dialect.name
        self.postgres = self.dialect == "postgresql"
        self._staged = False
        self._next_grid_id: int | None = None
        self._spare_ids: list[int] = []

    def _driver(self) -> Any:
        return self.session.connection().connection.driver_connection

    # ------------------------------------------------------------------ users
    def user_ids(self, dataset_id: int, hashes: Sequence[str]) -> list[int]:
        """``dataset_users.id`` of each keyed hash, creating the missing users."""
        if not hashes:
            return []
        if self.postgres:
            with self._driver().cursor() as cur:
                cur.execute(
                    "INSERT INTO dataset_users (dataset_id, user_hash) "
                    "SELECT %s, h FROM unnest(%s::text[]) AS h ON CONFLICT DO NOTHING",
                    (dataset_id, list(hashes)),
                )
                cur.execute(
                    "SELECT user_hash, id FROM dataset_users "
                    "WHERE dataset_id = %s AND user_hash = ANY(%s::text[])",
                    (dataset_id, list(hashes)),
                )
                found = dict(cur.fetchall())
        else:
            cur = self._driver().cursor()
            try:
                cur.executemany(
                    "INSERT INTO dataset_users (dataset_id, user_hash) VALUES (?, ?) "
                    "ON CONFLICT DO NOTHING",
                    [(dataset_id, h) for h in hashes],
                )
                found = {}
                for part in _chunks(list(hashes)):
                    marks = ",".join("?" * len(part))
                    cur.execute(
                        "SELECT user_hash, id FROM dataset_users "  # noqa: S608
                        f"WHERE dataset_id = ? AND user_hash IN ({marks})",
                        [dataset_id, *part],
                    )
                    found.update(cur.fetchall())
            finally:
                cur.close()
        return [found[h] for h in hashes]

    # ------------------------------------------------------------------ grids
    def allocate_grid_ids(self, n: int) -> list[int]:
        """``n`` fresh grid ids for grids inserted later in this transaction (Postgres: from
        the id sequence, in blocks; SQLite: after the largest id, safe under its write lock)."""
        if n <= 0:
            return []
        if self.postgres:
            if len(self._spare_ids) < n:
                with self._driver().cursor() as cur:
                    cur.execute(
                        "SELECT nextval(pg_get_serial_sequence('grids', 'id')) "
                        "FROM generate_series(1, %s)",
                        (max(n - len(self._spare_ids), ID_BLOCK),),
                    )
                    self._spare_ids.extend(r[0] for r in cur.fetchall())
            out, self._spare_ids = self._spare_ids[:n], self._spare_ids[n:]
            return out
        if self._next_grid_id is None:
            cur = self._driver().cursor()
            try:
                cur.execute("SELECT coalesce(max(id), 0) FROM grids")
                self._next_grid_id = int(cur.fetchone()[0]) + 1
            finally:
                cur.close()
        first = self._next_grid_id
        self._next_grid_id += n
        return list(range(first, first + n))

    def insert_grids(
        self, dataset_id: int, rows: Sequence[tuple[int, str, str, int, int, int, int, int]]
    ) -> None:
        """Insert grids ``(id, public_id, h3_cell, slot_start µs, n_users, n_records,
        max_user_records, version)``."""
        if not rows:
            return
        if self.postgres:
            with (
                self._driver().cursor() as cur,
                cur.copy(
                    "COPY grids (id, public_id, dataset_id, h3_cell, slot_start, n_users, "
                    "n_records, max_user_records, version) FROM STDIN (FORMAT BINARY)"
                ) as copy,
            ):
                copy.set_types(
                    ["int4", "text", "int4", "text", "timestamptz", "int4", "int4", "int4", "int4"]
                )
                for i, p, c, t, nu, nr, mx, v in rows:
                    copy.write_row(
                        (i, p, dataset_id, c, _EPOCH + timedelta(microseconds=t), nu, nr, mx, v)
                    )
            return
        slots = sqlite_datetime_text(np.array([r[3] for r in rows], dtype=np.int64))
        cur = self._driver().cursor()
        try:
            cur.executemany(
                "INSERT INTO grids (id, public_id, dataset_id, h3_cell, slot_start, n_users, "
                "n_records, max_user_records, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (i, p, dataset_id, c, t, nu, nr, mx, v)
                    for (i, p, c, _, nu, nr, mx, v), t in zip(rows, slots, strict=True)
                ],
            )
        finally:
            cur.close()

    def update_grids(self, rows: Sequence[tuple[int, int, int, int, int]]) -> None:
        """Set ``(id, n_users, n_records, max_user_records, version)`` of grids."""
        if not rows:
            return
        if self.postgres:
            cols = [list(c) for c in zip(*rows, strict=True)]
            with self._driver().cursor() as cur:
                cur.execute(
                    "UPDATE grids SET n_users = u.nu, n_records = u.nr, max_user_records = u.mx, "
                    "version = u.v FROM unnest(%s::int[], %s::int[], %s::int[], %s::int[], "
                    "%s::int[]) AS u(id, nu, nr, mx, v) WHERE grids.id = u.id",
                    cols,
                )
            return
        cur = self._driver().cursor()
        try:
            cur.executemany(
                "UPDATE grids SET n_users = ?, n_records = ?, max_user_records = ?, version = ? "
                "WHERE id = ?",
                [(nu, nr, mx, v, gid) for gid, nu, nr, mx, v in rows],
            )
        finally:
            cur.close()

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
        if self.postgres:
            target = "dpgate_snapshot_stage" if replace else "grid_snapshots"
            with self._driver().cursor() as cur:
                if replace:
                    cur.execute(
                        "CREATE TEMP TABLE IF NOT EXISTS dpgate_snapshot_stage "
                        "(LIKE grid_snapshots) ON COMMIT DROP"
                    )
                with cur.copy(
                    f'COPY {target} (grid_id, version, user_ids, counts, "values") '
                    "FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["int4", "int4", "bytea", "bytea", "bytea"])
                    for row in rows:
                        copy.write_row(row)
                if replace:
                    cur.execute(
                        'INSERT INTO grid_snapshots (grid_id, version, user_ids, counts, "values") '
                        'SELECT grid_id, version, user_ids, counts, "values" '
                        "FROM dpgate_snapshot_stage" + conflict
                    )
                    cur.execute("TRUNCATE dpgate_snapshot_stage")
            return
        cur = self._driver().cursor()
        try:
            cur.executemany(
                'INSERT INTO grid_snapshots (grid_id, version, user_ids, counts, "values") '
                "VALUES (?, ?, ?, ?, ?)" + conflict,
                rows,
            )
        finally:
            cur.close()

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
        others are inserted without looking (Postgres; the unique constraint still
        guards them).
        """
        if len(grid_ids) == 0:
            return 0
        if self.postgres:
            if check is None:
                check = np.ones(len(grid_ids), dtype=bool)
            return self._insert_postgres(dataset_id, grid_ids, user_ids, ts_us, values, check)
        return self._insert_sqlite(dataset_id, grid_ids, user_ids, ts_us, values)

    def latest_ts(self, dataset_id: int, user_ids: Sequence[int]) -> list[int | None]:
        """Per user, the latest stored record time (µs), or None (one index probe each)."""
        if not user_ids:
            return []
        if self.postgres:
            with self._driver().cursor() as cur:
                cur.execute(
                    "SELECT (SELECT max(r.ts) FROM records r "
                    "WHERE r.dataset_id = %s AND r.user_id = u.id) "
                    "FROM unnest(%s::int[]) WITH ORDINALITY AS u(id, n) ORDER BY u.n",
                    (dataset_id, list(user_ids)),
                )
                return [None if t is None else (t - _EPOCH) // _ONE_US for (t,) in cur]
        cur = self._driver().cursor()
        try:
            out: list[int | None] = []
            for uid in user_ids:
                cur.execute(
                    "SELECT max(ts) FROM records WHERE dataset_id = ? AND user_id = ?",
                    (dataset_id, uid),
                )
                (t,) = cur.fetchone()
                out.append(
                    None
                    if t is None
                    else (datetime.fromisoformat(t + "+00:00") - _EPOCH) // _ONE_US
                )
            return out
        finally:
            cur.close()

    def _insert_sqlite(self, dataset_id, grid_ids, user_ids, ts_us, values) -> int:
        params = zip(
            [dataset_id] * len(grid_ids),
            grid_ids.tolist(),
            user_ids.tolist(),
            sqlite_datetime_text(ts_us),
            values.tolist(),
            strict=True,
        )
        cur = self._driver().cursor()
        try:
            cur.executemany(
                "INSERT INTO records (dataset_id, grid_id, user_id, ts, value) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                params,
            )
            return cur.rowcount
        finally:
            cur.close()

    def _insert_postgres(self, dataset_id, grid_ids, user_ids, ts_us, values, check) -> int:
        rows = np.empty(len(grid_ids), dtype=_PG_STAGE_ROW)
        rows["n"] = 5
        for length in ("l1", "l2", "l3", "l4"):
            rows[length] = 8
        rows["l5"] = 1
        rows["grid"] = grid_ids
        rows["user"] = user_ids
        rows["ts"] = ts_us - PG_EPOCH_OFFSET_US
        rows["value"] = values
        rows["check"] = check
        inserted = 0
        with self._driver().cursor() as cur:
            if not self._staged:
                # JIT-compiling each batch's statement costs more than it saves here
                cur.execute("SET LOCAL jit = off")
                cur.execute(
                    "CREATE TEMP TABLE dpgate_ingest_stage (grid_id bigint, user_id bigint, "
                    "ts timestamptz, value double precision, checked boolean) ON COMMIT DROP"
                )
                self._staged = True
            with cur.copy(
                "COPY dpgate_ingest_stage (grid_id, user_id, ts, value, checked) "
                "FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.write(_PG_COPY_HEADER + rows.tobytes() + _PG_COPY_TRAILER)
            insert = (
                "INSERT INTO records (dataset_id, grid_id, user_id, ts, value) "
                "SELECT %(d)s, s.grid_id, s.user_id, s.ts, s.value FROM dpgate_ingest_stage s "
            )
            if not check.all():  # rows that cannot repeat a stored one: no look-up
                cur.execute(insert + "WHERE NOT s.checked", {"d": dataset_id})
                inserted += cur.rowcount
            if check.any():
                # The dataset lock makes this the only writer of the dataset's records, so
                # an anti-join finds every duplicate (the unique constraint is a backstop).
                cur.execute(
                    insert + "WHERE s.checked AND NOT EXISTS (SELECT 1 FROM records r "  # noqa: S608
                    "WHERE r.dataset_id = %(d)s AND r.user_id = s.user_id AND r.ts = s.ts)",
                    {"d": dataset_id},
                )
                inserted += cur.rowcount
            cur.execute("TRUNCATE dpgate_ingest_stage")
        return inserted

    def read_grids(self, grid_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(grid_id, user_id, value)`` arrays of these grids' records, ordered by grid,
        user (ascending ``dataset_users.id``), timestamp, record id."""
        ids = sorted(int(g) for g in grid_ids)
        if not ids:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, np.empty(0, dtype=np.float64)
        if self.postgres:
            id_list = "{" + ",".join(map(str, ids)) + "}"  # integers only: safe to inline
            sql = (
                "COPY (SELECT grid_id::bigint, user_id::bigint, value::float8 FROM records "  # noqa: S608
                f"WHERE grid_id = ANY('{id_list}'::bigint[]) "
                "ORDER BY grid_id, user_id, ts, id) TO STDOUT (FORMAT BINARY)"
            )
            buf = bytearray()
            with self._driver().cursor() as cur, cur.copy(sql) as copy:
                for block in copy:
                    buf += block
            ext = struct.unpack(">i", buf[15:19])[0]
            body = memoryview(buf)[19 + ext : len(buf) - 2]
            rows = np.frombuffer(body, dtype=_PG_FETCH_ROW)
            return (
                rows["grid"].astype(np.int64),
                rows["user"].astype(np.int64),
                rows["value"].astype(np.float64),
            )
        cur = self._driver().cursor()
        parts = []
        try:
            marks = ",".join("?" * len(ids))
            cur.execute(
                f"SELECT grid_id, user_id, value FROM records WHERE grid_id IN ({marks}) "  # noqa: S608
                "ORDER BY grid_id, user_id, ts, id",
                ids,
            )
            while fetched := cur.fetchmany(50_000):  # few Python tuples alive at a time
                parts.append(np.array(fetched, dtype=[("g", "<i8"), ("u", "<i8"), ("v", "<f8")]))
        finally:
            cur.close()
        arr = (
            np.concatenate(parts)
            if parts
            else np.empty(0, dtype=[("g", "<i8"), ("u", "<i8"), ("v", "<f8")])
        )
        return arr["g"].copy(), arr["u"].copy(), arr["v"].copy()
