"""Ingestion's bulk SQL on SQLite: ``executemany`` through the driver.

Records go through ``INSERT ... ON CONFLICT DO NOTHING``, which counts what was
really inserted, so duplicates are exact. Every statement runs on the session's own
connection, inside its (``BEGIN IMMEDIATE``) transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

#: Rows per statement when a list of keys goes into ``IN (...)``.
IN_CHUNK = 500

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_FETCHED = [("g", "<i8"), ("u", "<i8"), ("v", "<f8")]


def sqlite_datetime_text(us: np.ndarray) -> list[str]:
    """UTC microseconds as the text SQLAlchemy's SQLite ``DateTime`` stores
    (``YYYY-MM-DD HH:MM:SS.ffffff``), so raw and ORM writes compare equal."""
    text = np.datetime_as_string(np.asarray(us, dtype=np.int64).astype("datetime64[us]"), unit="us")
    result: list[str] = np.char.replace(text, "T", " ").tolist()
    return result


def _chunks(items: Sequence[Any], size: int = IN_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class SqliteBulk:
    """One transaction's bulk statements (``driver`` is its sqlite3 connection)."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self._next_grid_id: int | None = None

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        cur = self.driver.cursor()  # sqlite3 cursors are no context managers
        try:
            yield cur
        finally:
            cur.close()

    def user_ids(self, dataset_id: int, hashes: Sequence[str]) -> dict[str, int]:
        with self._cursor() as cur:
            cur.executemany(
                "INSERT INTO dataset_users (dataset_id, user_hash) VALUES (?, ?) "
                "ON CONFLICT DO NOTHING",
                [(dataset_id, h) for h in hashes],
            )
            found: dict[str, int] = {}
            for part in _chunks(list(hashes)):
                marks = ",".join("?" * len(part))
                cur.execute(
                    "SELECT user_hash, id FROM dataset_users "  # noqa: S608
                    f"WHERE dataset_id = ? AND user_hash IN ({marks})",
                    [dataset_id, *part],
                )
                found.update(cur.fetchall())
            return found

    def allocate_grid_ids(self, n: int) -> list[int]:
        """After the largest id (safe under SQLite's write lock)."""
        if self._next_grid_id is None:
            with self._cursor() as cur:
                cur.execute("SELECT coalesce(max(id), 0) FROM grids")
                self._next_grid_id = int(cur.fetchone()[0]) + 1
        first = self._next_grid_id
        self._next_grid_id += n
        return list(range(first, first + n))

    def insert_grids(
        self, dataset_id: int, rows: Sequence[tuple[int, str, str, int, int, int, int, int]]
    ) -> None:
        slots = sqlite_datetime_text(np.array([r[3] for r in rows], dtype=np.int64))
        with self._cursor() as cur:
            cur.executemany(
                "INSERT INTO grids (id, public_id, dataset_id, h3_cell, slot_start, n_users, "
                "n_records, max_user_records, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (i, p, dataset_id, c, t, nu, nr, mx, v)
                    for (i, p, c, _, nu, nr, mx, v), t in zip(rows, slots, strict=True)
                ],
            )

    def update_grids(self, rows: Sequence[tuple[int, int, int, int, int]]) -> None:
        with self._cursor() as cur:
            cur.executemany(
                "UPDATE grids SET n_users = ?, n_records = ?, max_user_records = ?, version = ? "
                "WHERE id = ?",
                [(nu, nr, mx, v, gid) for gid, nu, nr, mx, v in rows],
            )

    def write_snapshots(
        self, rows: Sequence[tuple[int, int, bytes, bytes, bytes]], *, conflict: str
    ) -> None:
        with self._cursor() as cur:
            cur.executemany(
                'INSERT INTO grid_snapshots (grid_id, version, user_ids, counts, "values") '
                "VALUES (?, ?, ?, ?, ?)" + conflict,
                rows,
            )

    def insert_records(
        self,
        dataset_id: int,
        grid_ids: np.ndarray,
        user_ids: np.ndarray,
        ts_us: np.ndarray,
        values: np.ndarray,
        check: np.ndarray | None,
    ) -> int:
        """``check`` is not used: every row is inserted with ``ON CONFLICT DO NOTHING``."""
        params = zip(
            [dataset_id] * len(grid_ids),
            grid_ids.tolist(),
            user_ids.tolist(),
            sqlite_datetime_text(ts_us),
            values.tolist(),
            strict=True,
        )
        with self._cursor() as cur:
            cur.executemany(
                "INSERT INTO records (dataset_id, grid_id, user_id, ts, value) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                params,
            )
            inserted: int = cur.rowcount
            return inserted

    def latest_ts(self, dataset_id: int, user_ids: Sequence[int]) -> list[int | None]:
        out: list[int | None] = []
        with self._cursor() as cur:
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

    def read_grids(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parts = []
        with self._cursor() as cur:
            marks = ",".join("?" * len(ids))
            cur.execute(
                f"SELECT grid_id, user_id, value FROM records WHERE grid_id IN ({marks}) "  # noqa: S608
                "ORDER BY grid_id, user_id, ts, id",
                ids,
            )
            while fetched := cur.fetchmany(50_000):  # few Python tuples alive at a time
                parts.append(np.array(fetched, dtype=_FETCHED))
        arr = np.concatenate(parts) if parts else np.empty(0, dtype=_FETCHED)
        return arr["g"].copy(), arr["u"].copy(), arr["v"].copy()
