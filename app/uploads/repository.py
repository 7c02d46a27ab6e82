"""All SQL of ingestion: binary ``COPY`` and ``unnest`` statements on the session's psycopg
connection, counting what was really inserted."""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import sql
from sqlalchemy.orm import Session

from app.datasets.partitions import (
    attach_month,
    dataset_table,
    ensure_months,
    month_table,
    next_month,
)
from app.datasets.repository import PG_EPOCH_OFFSET_US
from app.db.unit import driver_connection
from app.time.slots import datetime_to_us, us_to_datetime

#: Grid ids drawn from the Postgres sequence per round trip (unused ones are a harmless gap).
ID_BLOCK = 4096
#: Records encoded per part of a ``COPY`` stream.
COPY_PART_ROWS = 20_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_PG_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_PG_COPY_TRAILER = struct.pack(">h", -1)


def _copy_data(
    count: int, columns: Sequence[tuple[str, Any]], *, header: bool = True, trailer: bool = True
) -> bytes:
    """Binary ``COPY`` data of ``count`` tuples, each field ``(big-endian dtype, values)``; a
    part of a longer stream leaves out the header or the trailer."""
    fields: list[tuple[str, str]] = [("n", ">i2")]
    for i, (kind, _) in enumerate(columns):
        fields += [(f"l{i}", ">i4"), (f"c{i}", kind)]
    rows = np.empty(count, dtype=fields)
    rows["n"] = len(columns)
    for i, (kind, values) in enumerate(columns):
        rows[f"l{i}"] = np.dtype(kind).itemsize
        rows[f"c{i}"] = values
    head = _PG_COPY_HEADER if header else b""
    return head + rows.tobytes() + (_PG_COPY_TRAILER if trailer else b"")


def _snapshot_tuples(rows: Sequence[tuple[int, int, bytes, bytes, bytes]]) -> bytes:
    """Binary ``COPY`` data of snapshots ``(grid_id int4, version int4, three bytea)``."""
    pack = struct.Struct(">hiiii").pack
    parts = [_PG_COPY_HEADER]
    for gid, version, users, counts, values in rows:
        parts += (pack(5, 4, gid, 4, version), _LEN(len(users)), users, _LEN(len(counts)))
        parts += (counts, _LEN(len(values)), values)
    parts.append(_PG_COPY_TRAILER)
    return b"".join(parts)


_LEN = struct.Struct(">i").pack


def hash_user(secret: bytes, user_id: str) -> str:
    """The stored form of a user identifier: HMAC-SHA256 with the service secret, hex."""
    return hmac.new(secret, user_id.encode(), hashlib.sha256).hexdigest()


class IngestRepository:
    """Bulk SQL of ingestion, in the session's transaction. Writers to a dataset must hold its
    lock (``DatasetRepository.lock``): duplicate detection relies on it."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.driver: Any = driver_connection(session)
        self._staged = False
        self._months: tuple[int, int] | None = None  # the ts range (µs) whose months exist
        self._detached: dict[datetime, tuple[int, int]] = {}  # month -> its [start, end) µs
        self._spare_ids: list[int] = []
        self._grid_sequence: int | None = None

    def user_ids(self, dataset_id: int, hashes: Sequence[str]) -> list[int]:
        """``dataset_users.id`` of each keyed hash, creating the missing users."""
        if not hashes:
            return []
        with self.driver.cursor() as cur:
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
        return [found[h] for h in hashes]

    def allocate_grid_ids(self, n: int) -> list[int]:
        """``n`` fresh grid ids from the id sequence (drawn in blocks)."""
        if n <= 0:
            return []
        if len(self._spare_ids) < n:
            with self.driver.cursor() as cur:
                if self._grid_sequence is None:  # looked up once: not once per id drawn
                    cur.execute("SELECT pg_get_serial_sequence('grids', 'id')::regclass::oid")
                    self._grid_sequence = cur.fetchone()[0]
                cur.execute(
                    "SELECT nextval(%s::oid::regclass) FROM generate_series(1, %s)",
                    (self._grid_sequence, max(n - len(self._spare_ids), ID_BLOCK)),
                )
                self._spare_ids.extend(r[0] for r in cur.fetchall())
        out, self._spare_ids = self._spare_ids[:n], self._spare_ids[n:]
        return out

    def insert_grids(
        self, dataset_id: int, rows: Sequence[tuple[int, str, str, int, int, int, int, int]]
    ) -> None:
        """Insert grids ``(id, public_id, h3_cell, slot_start µs, n_users, n_records,
        max_user_records, version)`` by one binary ``COPY`` built by numpy."""
        if not rows:
            return
        ids, public, cells, slots, nu, nr, mx, version = zip(*rows, strict=True)
        p_len, c_len = len(public[0]), len(cells[0])
        if any(len(p) != p_len for p in public) or any(len(c) != c_len for c in cells):
            raise ValueError("grid public ids and cells must each have one length")
        data = _copy_data(len(rows), [
            (">i4", ids), (f"S{p_len}", np.array(public, dtype=f"S{p_len}")), (">i4", dataset_id),
            (f"S{c_len}", np.array(cells, dtype=f"S{c_len}")),
            (">i8", np.array(slots, dtype=np.int64) - PG_EPOCH_OFFSET_US),
            (">i4", nu), (">i4", nr), (">i4", mx), (">i4", version),
        ])  # fmt: skip
        with (
            self.driver.cursor() as cur,
            cur.copy(
                "COPY grids (id, public_id, dataset_id, h3_cell, slot_start, n_users, "
                "n_records, max_user_records, version) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.write(data)

    def update_grids(self, rows: Sequence[tuple[int, int, int, int, int]]) -> None:
        """Set ``(id, n_users, n_records, max_user_records, version)`` of grids."""
        if not rows:
            return
        cols = [list(c) for c in zip(*rows, strict=True)]
        with self.driver.cursor() as cur:
            cur.execute(
                "UPDATE grids SET n_users = u.nu, n_records = u.nr, max_user_records = u.mx, "
                "version = u.v FROM unnest(%s::int[], %s::int[], %s::int[], %s::int[], "
                "%s::int[]) AS u(id, nu, nr, mx, v) WHERE grids.id = u.id",
                cols,
            )

    def write_snapshots(
        self, rows: Sequence[tuple[int, int, bytes, bytes, bytes]], *, replace: bool
    ) -> None:
        """Store snapshots ``(grid_id, version, user_ids, counts, values)``; ``replace``
        overwrites existing ones (grids that had records before)."""
        if not rows:
            return
        target = "dpgate_snapshot_stage" if replace else "grid_snapshots"
        with self.driver.cursor() as cur:
            if replace:
                cur.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS dpgate_snapshot_stage "
                    "(LIKE grid_snapshots) ON COMMIT DROP"
                )
            with cur.copy(
                f'COPY {target} (grid_id, version, user_ids, counts, "values") '
                "FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.write(_snapshot_tuples(rows))
            if replace:
                cur.execute(
                    'INSERT INTO grid_snapshots (grid_id, version, user_ids, counts, "values") '
                    'SELECT grid_id, version, user_ids, counts, "values" '
                    "FROM dpgate_snapshot_stage ON CONFLICT (grid_id) DO UPDATE SET "
                    "version = excluded.version, user_ids = excluded.user_ids, "
                    'counts = excluded.counts, "values" = excluded."values"'
                )
                cur.execute("TRUNCATE dpgate_snapshot_stage")

    def insert_records(
        self,
        dataset_id: int,
        grid_ids: np.ndarray,
        user_ids: np.ndarray,
        ts_us: np.ndarray,
        values: np.ndarray,
    ) -> None:
        """Store records by one binary ``COPY``, sent in parts (Postgres stores one while the
        next is encoded). None may repeat a stored or another's (user, ts): see
        :meth:`stored_already` and ``app.uploads.ingestor.first_occurrences``; best in key
        order."""
        if not ts_us.size:
            return
        self._ensure_months(dataset_id, int(ts_us.min()), int(ts_us.max()))
        columns: tuple[np.ndarray, ...] = (grid_ids, user_ids, ts_us, values)
        rest = np.ones(ts_us.size, dtype=bool)
        for month, (start, end) in self._detached.items():
            rows = np.flatnonzero((ts_us >= start) & (ts_us < end))
            rest[rows] = False
            self._copy(month_table(dataset_id, month), dataset_id, *(c[rows] for c in columns))
        if not rest.all():
            columns = tuple(c[rest] for c in columns)
        self._copy(dataset_table(dataset_id), dataset_id, *columns)

    def _copy(
        self,
        table: str,
        dataset_id: int,
        grid_ids: np.ndarray,
        user_ids: np.ndarray,
        ts_us: np.ndarray,
        values: np.ndarray,
    ) -> None:
        if not ts_us.size:
            return
        statement = sql.SQL(
            "COPY {} (dataset_id, grid_id, user_id, ts, value) FROM STDIN (FORMAT BINARY)"
        ).format(sql.Identifier(table))
        with self.driver.cursor() as cur, cur.copy(statement) as copy:
            for a in range(0, ts_us.size, COPY_PART_ROWS):
                b = min(a + COPY_PART_ROWS, ts_us.size)
                copy.write(_copy_data(b - a, [
                    (">i4", dataset_id), (">i4", grid_ids[a:b]), (">i4", user_ids[a:b]),
                    (">i8", ts_us[a:b] - PG_EPOCH_OFFSET_US), (">f8", values[a:b]),
                ], header=a == 0, trailer=b == ts_us.size))  # fmt: skip

    def _ensure_months(self, dataset_id: int, first_us: int, last_us: int) -> None:
        """The month partitions of ``[first_us, last_us]`` (and the month after), made
        where missing: looked up once per upload unless a batch reaches past them. A month
        made here is filled detached (``ensure_months``) until :meth:`attach_months`."""
        known = self._months
        if known is not None and known[0] <= first_us and last_us <= known[1]:
            return
        lo = first_us if known is None else min(first_us, known[0])
        hi = last_us if known is None else max(last_us, known[1])
        made = ensure_months(
            self.session, dataset_id, us_to_datetime(lo), us_to_datetime(hi), detached=True
        )
        for month in made:
            self._detached[month] = (datetime_to_us(month), datetime_to_us(next_month(month)))
        self._months = (lo, hi)

    def attach_months(self, dataset_id: int) -> None:
        """Attach the months this upload filled detached (each index built in one pass)."""
        for month in self._detached:
            attach_month(self.session, dataset_id, month)
        self._detached.clear()

    def stored_already(
        self, dataset_id: int, user_ids: np.ndarray, ts_us: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:
        """Which records repeat a stored record's (user, ts), a bool each; only ``rows``
        (indices) are looked up (a temporary table, one semi-join, exact under the dataset
        lock)."""
        found = np.zeros(ts_us.size, dtype=bool)
        if rows.size and self._detached:
            # a detached month has no index to look in: attach it first
            t = ts_us[rows]
            if any(((t >= a) & (t < b)).any() for a, b in self._detached.values()):
                self.attach_months(dataset_id)
        if rows.size:
            with self.driver.cursor() as cur:
                found[rows[self._repeated(cur, dataset_id, user_ids, ts_us, rows)]] = True
        return found

    def _repeated(
        self, cur: Any, dataset_id: int, user_ids: np.ndarray, ts_us: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:
        """Which of ``rows`` (indices) repeat a stored record's (user, ts): a bool each."""
        if not self._staged:
            # JIT-compiling each batch's statement costs more than it saves here
            cur.execute("SET LOCAL jit = off")
            cur.execute(
                "CREATE TEMP TABLE dpgate_ingest_stage (n int, user_id int, ts timestamptz) "
                "ON COMMIT DROP"
            )
            self._staged = True
        data = _copy_data(rows.size, [
            (">i4", np.arange(rows.size)), (">i4", user_ids[rows]),
            (">i8", ts_us[rows] - PG_EPOCH_OFFSET_US),
        ])  # fmt: skip
        with cur.copy("COPY dpgate_ingest_stage (n, user_id, ts) FROM STDIN (FORMAT BINARY)") as c:
            c.write(data)

        # The dataset lock makes this the only writer of the dataset's records, so the
        # semi-join finds every duplicate (the primary key is a backstop).
        cur.execute(
            sql.SQL(
                "SELECT s.n FROM dpgate_ingest_stage s WHERE EXISTS (SELECT 1 FROM {} r "
                "WHERE r.dataset_id = %s AND r.user_id = s.user_id AND r.ts = s.ts)"
            ).format(sql.Identifier(dataset_table(dataset_id))),
            (dataset_id,),
        )
        found = np.zeros(rows.size, dtype=bool)
        found[[n for (n,) in cur.fetchall()]] = True
        cur.execute("TRUNCATE dpgate_ingest_stage")
        return found

    def latest_ts(self, dataset_id: int, user_ids: Sequence[int]) -> list[int | None]:
        """Per user, the latest stored record time (µs), or None (one index probe each)."""
        if not user_ids:
            return []
        with self.driver.cursor() as cur:
            cur.execute(
                sql.SQL(
                    "SELECT (SELECT max(r.ts) FROM {} r WHERE r.dataset_id = %s "
                    "AND r.user_id = u.id) "
                    "FROM unnest(%s::int[]) WITH ORDINALITY AS u(id, n) ORDER BY u.n"
                ).format(sql.Identifier(dataset_table(dataset_id))),
                (dataset_id, list(user_ids)),
            )
            return [None if t is None else (t - _EPOCH) // _ONE_US for (t,) in cur]
