"""All SQL of ingestion: binary ``COPY`` and array (``unnest``) statements.

Every statement runs on the session's own psycopg connection, inside its
transaction; each counts what was really inserted, so duplicates are exact.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.datasets.repository import copy_records

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
        ("l1", ">i4"), ("grid", ">i4"),
        ("l2", ">i4"), ("user", ">i4"),
        ("l3", ">i4"), ("ts", ">i8"),
        ("l4", ">i4"), ("value", ">f8"),
    ]
)  # fmt: skip
_PG_RECORD_ROW = np.dtype(
    [("n0", ">i2"), ("l0", ">i4"), ("dataset", ">i4"), *_PG_STAGE_ROW.descr[1:]]
)


def _copy_rows(
    dtype: np.dtype,
    grid_ids: np.ndarray,
    user_ids: np.ndarray,
    ts_us: np.ndarray,
    values: np.ndarray,
) -> np.ndarray:
    """Binary ``COPY`` tuples: ``(grid int4, user int4, ts, value)``, after a leading
    ``dataset int4`` for ``_PG_RECORD_ROW`` (the caller sets it)."""
    rows = np.empty(len(grid_ids), dtype=dtype)
    fields = dtype.names or ()
    if "n0" in fields:
        rows["n0"], rows["l0"] = 5, 4
    else:
        rows["n"] = 4
    rows["l1"] = rows["l2"] = 4
    rows["l3"] = rows["l4"] = 8
    rows["grid"] = grid_ids
    rows["user"] = user_ids
    rows["ts"] = ts_us - PG_EPOCH_OFFSET_US
    rows["value"] = values
    return rows


def hash_user(secret: bytes, user_id: str) -> str:
    """The stored form of a user identifier: HMAC-SHA256 with the service secret, hex."""
    return hmac.new(secret, user_id.encode(), hashlib.sha256).hexdigest()


class IngestRepository:
    """Bulk SQL of ingestion, on the session's own psycopg connection (so inside its
    transaction). Writers to one dataset must hold its lock
    (:meth:`app.datasets.repository.DatasetRepository.lock`): duplicate detection
    relies on it."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.driver: Any = session.connection().connection.driver_connection
        self._staged = False
        self._spare_ids: list[int] = []

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
        """``n`` fresh grid ids for grids inserted later in this transaction (from the id
        sequence, in blocks)."""
        if n <= 0:
            return []
        if len(self._spare_ids) < n:
            with self.driver.cursor() as cur:
                cur.execute(
                    "SELECT nextval(pg_get_serial_sequence('grids', 'id')) "
                    "FROM generate_series(1, %s)",
                    (max(n - len(self._spare_ids), ID_BLOCK),),
                )
                self._spare_ids.extend(r[0] for r in cur.fetchall())
        out, self._spare_ids = self._spare_ids[:n], self._spare_ids[n:]
        return out

    def insert_grids(
        self, dataset_id: int, rows: Sequence[tuple[int, str, str, int, int, int, int, int]]
    ) -> None:
        """Insert grids ``(id, public_id, h3_cell, slot_start µs, n_users, n_records,
        max_user_records, version)`` with one binary ``COPY`` built by numpy (public ids
        and cells of one length each, as ``secrets.token_urlsafe`` and H3 make them)."""
        if not rows:
            return
        ids, public, cells, slots, nu, nr, mx, version = zip(*rows, strict=True)
        p_len, c_len = len(public[0]), len(cells[0])
        if any(len(p) != p_len for p in public) or any(len(c) != c_len for c in cells):
            raise ValueError("grid public ids and cells must each have one length")
        dtype = np.dtype(
            [("n", ">i2"), ("l1", ">i4"), ("id", ">i4"), ("l2", ">i4"), ("public", f"S{p_len}"),
             ("l3", ">i4"), ("dataset", ">i4"), ("l4", ">i4"), ("cell", f"S{c_len}"),
             ("l5", ">i4"), ("slot", ">i8"), ("l6", ">i4"), ("nu", ">i4"), ("l7", ">i4"),
             ("nr", ">i4"), ("l8", ">i4"), ("mx", ">i4"), ("l9", ">i4"), ("version", ">i4")]
        )  # fmt: skip
        out = np.empty(len(rows), dtype=dtype)
        out["n"] = 9
        for name, length in (("l1", 4), ("l2", p_len), ("l3", 4), ("l4", c_len), ("l5", 8)):
            out[name] = length
        for name in ("l6", "l7", "l8", "l9"):
            out[name] = 4
        out["id"], out["dataset"] = ids, dataset_id
        out["public"] = np.array(public, dtype=f"S{p_len}")
        out["cell"] = np.array(cells, dtype=f"S{c_len}")
        out["slot"] = np.array(slots, dtype=np.int64) - PG_EPOCH_OFFSET_US
        out["nu"], out["nr"], out["mx"], out["version"] = nu, nr, mx, version
        with (
            self.driver.cursor() as cur,
            cur.copy(
                "COPY grids (id, public_id, dataset_id, h3_cell, slot_start, n_users, "
                "n_records, max_user_records, version) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.write(_PG_COPY_HEADER + out.tobytes() + _PG_COPY_TRAILER)

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
                copy.set_types(["int4", "int4", "bytea", "bytea", "bytea"])
                for row in rows:
                    copy.write_row(row)
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
        check: np.ndarray | None = None,
    ) -> int:
        """Store records whose (user, ts) is not stored yet; returns how many were inserted.

        The rows must not repeat a (user, ts) among themselves (see
        ``app.uploads.ingestor.first_occurrences``); they are best given in (user, ts)
        order. ``check`` (bool per row, default all) marks the rows that may repeat a
        stored one. The others go straight into ``records`` by binary ``COPY`` (the
        unique constraint still guards them); the checked ones go through a temporary
        staging table and one ``INSERT ... SELECT ... WHERE NOT EXISTS`` (an anti-join
        on the unique key: cheaper than ``ON CONFLICT`` and exact under the dataset lock).
        """
        if len(grid_ids) == 0:
            return 0
        if check is None:
            check = np.ones(len(grid_ids), dtype=bool)
        inserted = 0
        with self.driver.cursor() as cur:
            if not check.all():  # rows that cannot repeat a stored one: no look-up
                free = ~check
                rows = _copy_rows(
                    _PG_RECORD_ROW, grid_ids[free], user_ids[free], ts_us[free], values[free]
                )
                rows["dataset"] = dataset_id
                with cur.copy(
                    "COPY records (dataset_id, grid_id, user_id, ts, value) "
                    "FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.write(_PG_COPY_HEADER + rows.tobytes() + _PG_COPY_TRAILER)
                inserted += len(rows)
            if check.any():
                inserted += self._insert_checked(
                    cur, dataset_id, grid_ids[check], user_ids[check], ts_us[check], values[check]
                )
        return inserted

    def _insert_checked(
        self,
        cur: Any,
        dataset_id: int,
        grid_ids: np.ndarray,
        user_ids: np.ndarray,
        ts_us: np.ndarray,
        values: np.ndarray,
    ) -> int:
        if not self._staged:
            # JIT-compiling each batch's statement costs more than it saves here
            cur.execute("SET LOCAL jit = off")
            cur.execute(
                "CREATE TEMP TABLE dpgate_ingest_stage (grid_id int, user_id int, "
                "ts timestamptz, value double precision) ON COMMIT DROP"
            )
            self._staged = True
        rows = _copy_rows(_PG_STAGE_ROW, grid_ids, user_ids, ts_us, values)
        with cur.copy(
            "COPY dpgate_ingest_stage (grid_id, user_id, ts, value) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.write(_PG_COPY_HEADER + rows.tobytes() + _PG_COPY_TRAILER)
        # The dataset lock makes this the only writer of the dataset's records, so an
        # anti-join finds every duplicate (the unique constraint is a backstop).
        cur.execute(
            "INSERT INTO records (dataset_id, grid_id, user_id, ts, value) "
            "SELECT %(d)s, s.grid_id, s.user_id, s.ts, s.value FROM dpgate_ingest_stage s "
            "WHERE NOT EXISTS (SELECT 1 FROM records r "
            "WHERE r.dataset_id = %(d)s AND r.user_id = s.user_id AND r.ts = s.ts)",
            {"d": dataset_id},
        )
        inserted = int(cur.rowcount)
        cur.execute("TRUNCATE dpgate_ingest_stage")
        return inserted

    def latest_ts(self, dataset_id: int, user_ids: Sequence[int]) -> list[int | None]:
        """Per user, the latest stored record time (µs), or None (one index probe each)."""
        if not user_ids:
            return []
        with self.driver.cursor() as cur:
            cur.execute(
                "SELECT (SELECT max(r.ts) FROM records r "
                "WHERE r.dataset_id = %s AND r.user_id = u.id) "
                "FROM unnest(%s::int[]) WITH ORDINALITY AS u(id, n) ORDER BY u.n",
                (dataset_id, list(user_ids)),
            )
            return [None if t is None else (t - _EPOCH) // _ONE_US for (t,) in cur]

    def read_grids(self, grid_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(grid_id, user_id, value)`` arrays of these grids' records, ordered by grid,
        user (ascending ``dataset_users.id``), timestamp, record id."""
        return copy_records(self.session, grid_ids, "grid_id, user_id, ts, id")
