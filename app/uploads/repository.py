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
        ("l1", ">i4"), ("grid", ">i8"),
        ("l2", ">i4"), ("user", ">i8"),
        ("l3", ">i4"), ("ts", ">i8"),
        ("l4", ">i4"), ("value", ">f8"),
        ("l5", ">i4"), ("check", "u1"),
    ]
)  # fmt: skip


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
        max_user_records, version)``."""
        if not rows:
            return
        with (
            self.driver.cursor() as cur,
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
        stored one; the others are inserted without looking (the unique constraint
        still guards them). Records go through binary ``COPY`` into a temporary staging
        table and one ``INSERT ... SELECT ... WHERE NOT EXISTS`` (an anti-join on the
        unique key: cheaper than ``ON CONFLICT`` and exact under the dataset lock).
        """
        if len(grid_ids) == 0:
            return 0
        if check is None:
            check = np.ones(len(grid_ids), dtype=bool)
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
        with self.driver.cursor() as cur:
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
