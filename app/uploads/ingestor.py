"""Mapping parsed batches to database ids and writing them (:class:`Ingestor`), and
building the snapshots of the grids an upload touched at its end.

A new grid only gets an id while records stream in; :meth:`Ingestor.finish` inserts
it with its final summary and snapshot, built from the rows kept in memory (or
spilled to temporary files past :data:`MEMORY_REBUILD_ROWS`, :class:`NewGridRows`);
grids that had records are re-read from the database.
"""

from __future__ import annotations

import base64
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import h3
import numpy as np
from sqlalchemy.orm import Session

from app.datasets.grid_store import GridSummary, summarise_grids
from app.datasets.models import Dataset
from app.datasets.repository import GridRepository
from app.ingest.batches import Batch
from app.ingest.timeslots import datetime_to_us, us_to_datetime
from app.uploads.repository import IngestRepository, hash_user

#: Rows of new grids kept in memory to build their snapshots; beyond this they are
#: spilled to ``SPILL_BUCKETS`` temporary files (grids that had records are re-read).
MEMORY_REBUILD_ROWS = 1_000_000
SPILL_BUCKETS = 64
#: Grids written per statement when storing summaries and snapshots.
STORE_GRIDS = 5000
#: Records read back per query when rebuilding from the database, and grids per query.
REBUILD_RECORDS = 1_000_000
REBUILD_GRIDS = 1000


def first_occurrences(user_ids: np.ndarray, ts_us: np.ndarray) -> np.ndarray:
    """Indices of the rows to keep, in (user, ts) order: the first row of every
    (user, ts) pair (file order decides among equals)."""
    order = np.lexsort((ts_us, user_ids))  # stable: equal keys keep their order
    u, t = user_ids[order], ts_us[order]
    keep = np.ones(order.size, dtype=bool)
    keep[1:] = (u[1:] != u[:-1]) | (t[1:] != t[:-1])
    return order[keep]


@dataclass(slots=True)
class _Grid:
    grid_id: int
    version: int
    n_records: int  # before this upload
    new_key: tuple[str, int] | None = None  # (h3 cell, slot µs) of a grid not yet inserted
    dirty: bool = False  # some rows may not have been inserted: rebuild from the database


_NEVER = np.iinfo(np.int64).min
_ROW = np.dtype([("code", "<i8"), ("user", "<i8"), ("ts", "<i8"), ("value", "<f8")])


class NewGridRows:
    """The rows stored this upload for grids it creates, kept to build their snapshots
    without reading them back from the database.

    Held in memory up to ``MEMORY_REBUILD_ROWS`` rows, then spilled to ``SPILL_BUCKETS``
    temporary files partitioned by grid code, so each grid lies whole in one bucket
    and memory stays bounded by one bucket. :meth:`close` removes the files.
    """

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self._rows = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._files: list[BinaryIO] = []

    def add(self, codes: np.ndarray, users: np.ndarray, ts: np.ndarray, values: np.ndarray) -> None:
        rows = np.empty(len(codes), dtype=_ROW)
        rows["code"], rows["user"], rows["ts"], rows["value"] = codes, users, ts, values
        self._rows += len(rows)
        if self._dir is None and self._rows <= MEMORY_REBUILD_ROWS:
            self._chunks.append(rows)
            return
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="dpgate-ingest-")
            self._files = [
                open(Path(self._dir.name) / f"{b}.bin", "w+b")  # noqa: SIM115 - closed in close()
                for b in range(SPILL_BUCKETS)
            ]
            for chunk in self._chunks:
                self._spill(chunk)
            self._chunks = []
        self._spill(rows)

    def _spill(self, rows: np.ndarray) -> None:
        bucket = rows["code"] % SPILL_BUCKETS
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(SPILL_BUCKETS + 1))
        for b in range(SPILL_BUCKETS):
            if bounds[b] < bounds[b + 1]:
                self._files[b].write(rows[order[bounds[b] : bounds[b + 1]]].tobytes())

    def groups(self) -> Iterator[np.ndarray]:
        """The rows in parts that each hold whole grids (one part, or one per bucket).
        Each part is handed over without a reference kept here, to free it early."""
        if self._dir is None:
            if self._chunks:
                yield self._take_chunks()
            return
        for f in self._files:
            if f.tell():
                yield self._take_bucket(f)

    def _take_chunks(self) -> np.ndarray:
        chunks, self._chunks = self._chunks, []
        return np.concatenate(chunks)

    @staticmethod
    def _take_bucket(f: BinaryIO) -> np.ndarray:
        f.flush()
        f.seek(0)
        rows = np.frombuffer(f.read(), dtype=_ROW)
        f.truncate(0)
        return rows

    def close(self) -> None:
        for f in self._files:
            f.close()
        if self._dir is not None:
            self._dir.cleanup()
        self._chunks, self._files, self._dir = [], [], None


class Ingestor:
    """Maps a batch's user and grid codes to database ids and writes its records.

    Users are created at once (keyed hashes). A new grid only gets an id here;
    :meth:`finish` inserts it with its final summary and snapshot.
    """

    def __init__(self, session: Session, dataset: Dataset, secret: bytes) -> None:
        self.dataset = dataset
        self.secret = secret
        self.grid_repo = GridRepository(session)
        self.bulk = IngestRepository(session)
        self.user_ids = np.empty(0, dtype=np.int64)  # by user code
        self.grid_ids = np.empty(0, dtype=np.int64)  # by grid code
        self.grids: list[_Grid] = []  # by grid code
        self.attempted = np.empty(0, dtype=np.int64)  # rows offered, by grid code
        self.is_new = np.empty(0, dtype=bool)  # grid not stored before this upload, by code
        self.slot_grids: dict[int, dict[str, _Grid]] = {}  # slot µs -> stored grids
        self.new_rows = NewGridRows()
        self.latest = np.empty(0, dtype=np.int64)  # latest stored time, by user code
        self.inserted = 0
        self.duplicates = 0

    # -------------------------------------------------------------- per batch
    def write(self, batch: Batch) -> None:
        if batch.new_users:
            hashes = [hash_user(self.secret, u) for u in batch.new_users]
            ids = self.bulk.user_ids(self.dataset.id, hashes)
            self.user_ids = np.concatenate([self.user_ids, np.array(ids, dtype=np.int64)])
            known = [_NEVER if t is None else t for t in self.bulk.latest_ts(self.dataset.id, ids)]
            self.latest = np.concatenate([self.latest, np.array(known, dtype=np.int64)])
        if batch.new_grids:
            self._add_grids(batch.new_grids)
        if not len(batch):
            return
        self.attempted += np.bincount(batch.grid_codes, minlength=len(self.attempted))
        keep = first_occurrences(batch.user_codes, batch.ts_us)
        codes, user_codes = batch.grid_codes[keep], batch.user_codes[keep]
        ts, values = batch.ts_us[keep], batch.values[keep]
        # A row later than everything stored for its user cannot repeat a stored row.
        check = ts <= self.latest[user_codes]
        np.maximum.at(self.latest, user_codes, ts)
        users = self.user_ids[user_codes]
        inserted = self.bulk.insert_records(
            self.dataset.id, self.grid_ids[codes], users, ts, values, check
        )
        self.inserted += inserted
        self.duplicates += len(batch) - inserted
        if inserted == len(keep):  # exactly these rows were stored: keep new grids' rows
            new = self.is_new[codes]
            self.new_rows.add(codes[new], users[new], ts[new], values[new])
        else:
            for c in np.unique(codes).tolist():
                self.grids[c].dirty = True

    def _add_grids(self, keys: list[tuple[int, int]]) -> None:
        # Each slot's stored grids are loaded once per upload; a key not among them is
        # new (the dataset lock keeps other writers out).
        slots = sorted({s for _, s in keys} - self.slot_grids.keys())
        for s in slots:
            self.slot_grids[s] = {}
        if slots:
            rows = self.grid_repo.in_slots(self.dataset.id, [us_to_datetime(s) for s in slots])
            for gid, cell_str, slot_start, version, n_records in rows:
                self.slot_grids[datetime_to_us(slot_start)][cell_str] = _Grid(
                    gid, version, n_records
                )
        grids: list[_Grid | None] = [
            self.slot_grids[slot].get(h3.int_to_str(cell)) for cell, slot in keys
        ]
        fresh = [i for i, g in enumerate(grids) if g is None]
        for i, gid in zip(fresh, self.bulk.allocate_grid_ids(len(fresh)), strict=True):
            cell, slot = keys[i]
            grids[i] = _Grid(gid, 0, 0, new_key=(h3.int_to_str(cell), slot))
        added = [g for g in grids if g is not None]
        self.grids.extend(added)
        self.grid_ids = np.concatenate(
            [self.grid_ids, np.array([g.grid_id for g in added], dtype=np.int64)]
        )
        self.attempted = np.concatenate([self.attempted, np.zeros(len(added), dtype=np.int64)])
        self.is_new = np.concatenate([self.is_new, [g.new_key is not None for g in added]])

    # ----------------------------------------------------------------- at end
    def finish(self) -> int:
        """Insert new grids and refresh changed ones (summary, snapshot, version + 1).

        A new grid whose rows all turned out duplicates is never created; a stored
        grid that only received duplicates keeps its version. Returns how many
        grids were created or changed.
        """
        by_id = {g.grid_id: g for g in self.grids}
        # new grids whose every row is known: built from the kept rows
        dirty = np.array([g.dirty for g in self.grids], dtype=bool)
        from_rows = {c for c, g in enumerate(self.grids) if g.new_key and not g.dirty}
        changed = 0
        for rows in self.new_rows.groups():
            if dirty.any():
                rows = rows[~dirty[rows["code"]]]
            rows = rows[np.lexsort((rows["ts"], rows["user"], rows["code"]))]
            grid_ids = self.grid_ids[rows["code"]]
            users, values = rows["user"].copy(), rows["value"].copy()
            del rows
            changed += self._store(by_id, summarise_grids(grid_ids, users, values))
        # the others (grids that had records, or saw duplicates of stored rows): re-read
        rest = [
            (g.grid_id, g.n_records + int(n))
            for c, (g, n) in enumerate(zip(self.grids, self.attempted.tolist(), strict=True))
            if c not in from_rows
        ]
        for group in _groups(sorted(rest)):
            changed += self._store(by_id, summarise_grids(*self.bulk.read_grids(group)))
        return changed

    def _store(self, by_id: dict[int, _Grid], summaries: Iterator[GridSummary]) -> int:
        """Write the grids whose record count changed, ``STORE_GRIDS`` at a time."""
        changed = 0
        new_grids, new_snaps, old_grids, old_snaps = [], [], [], []
        for s in summaries:
            grid = by_id[s.grid_id]
            if s.n_records == grid.n_records:
                continue  # only duplicates arrived: unchanged
            version = grid.version + 1
            snap = (s.grid_id, version, s.user_ids, s.counts, s.values)
            summary = (s.n_users, s.n_records, s.max_user_records, version)
            if grid.new_key is None:
                old_grids.append((s.grid_id, *summary))
                old_snaps.append(snap)
            else:
                cell, slot = grid.new_key
                new_grids.append((s.grid_id, "", cell, slot, *summary))
                new_snaps.append(snap)
            if len(new_grids) + len(old_grids) >= STORE_GRIDS:
                changed += self._flush(new_grids, new_snaps, old_grids, old_snaps)
                new_grids, new_snaps, old_grids, old_snaps = [], [], [], []
        return changed + self._flush(new_grids, new_snaps, old_grids, old_snaps)

    def _flush(self, new_grids: list, new_snaps: list, old_grids: list, old_snaps: list) -> int:
        ids = public_ids(len(new_grids))
        new_grids = [(g[0], p, *g[2:]) for g, p in zip(new_grids, ids, strict=True)]
        self.bulk.insert_grids(self.dataset.id, new_grids)
        self.bulk.write_snapshots(new_snaps, replace=False)
        self.bulk.update_grids(old_grids)
        self.bulk.write_snapshots(old_snaps, replace=True)
        return len(new_grids) + len(old_grids)


def public_ids(n: int) -> list[str]:
    """``n`` grid ids for the API, each as ``secrets.token_urlsafe(12)`` makes one (12
    random bytes in URL-safe base64: 16 characters), drawn in one call."""
    text = base64.urlsafe_b64encode(secrets.token_bytes(12 * n)).decode()
    return [text[i : i + 16] for i in range(0, 16 * n, 16)]


def _groups(grids: list[tuple[int, int]]) -> Iterator[list[int]]:
    """Grid ids in groups of at most ``REBUILD_GRIDS`` grids and about
    ``REBUILD_RECORDS`` records (from an upper bound per grid)."""
    group: list[int] = []
    size = 0
    for gid, est in grids:
        if group and (size + est > REBUILD_RECORDS or len(group) >= REBUILD_GRIDS):
            yield group
            group, size = [], 0
        group.append(gid)
        size += est
    if group:
        yield group
