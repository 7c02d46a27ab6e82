"""Mapping parsed batches to database ids and writing them (:class:`Ingestor`), then building the
snapshots of the grids an upload touched.

A new grid's snapshot is built from its rows (kept in memory or spilled: :class:`NewGridRows`), a
stored grid's from its stored snapshot followed by its new rows; a stored grid that receives a row
not later than its user's stored ones is read back whole."""

from __future__ import annotations

import base64
import itertools
import secrets
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import h3
import numpy as np
from sqlalchemy.orm import Session

from app.datasets.grid_store import GridSummary, summarise_grids
from app.datasets.models import Dataset
from app.datasets.repository import GridRepository, RecordArrays, copy_records, snapshot_records
from app.ingest.batches import Batch
from app.time.slots import datetime_to_us, get_zone, slot_end_bound_us, us_to_datetime
from app.uploads.repository import IngestRepository, hash_user
from app.uploads.retention import refuse_dropped_slots

#: Rows stored kept in memory to build snapshots; beyond this they are spilled to
#: ``SPILL_BUCKETS`` temporary files.
MEMORY_REBUILD_ROWS = 1_000_000
SPILL_BUCKETS = 64
#: Grids written per statement when storing summaries and snapshots.
STORE_GRIDS = 5000


def first_occurrences(user_ids: np.ndarray, ts_us: np.ndarray) -> np.ndarray:
    """Indices of the first row of every (user, ts) pair, in (user, ts) order."""
    u, t = user_ids, ts_us
    if np.all((u[1:] > u[:-1]) | ((u[1:] == u[:-1]) & (t[1:] >= t[:-1]))):
        order = np.arange(u.size)  # already in (user, ts) order, as most files come
    else:
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
    slot_us: int
    cell: int | None = None  # the H3 cell of a grid not yet inserted


_NEVER = np.iinfo(np.int64).min
_NO_USERS = np.empty(0, dtype=np.int64)
_ROW = np.dtype([("code", "<i8"), ("user", "<i8"), ("ts", "<i8"), ("value", "<f8")])


class NewGridRows:
    """The rows stored this upload, to build their grids' snapshots without reading them back: in
    memory up to ``MEMORY_REBUILD_ROWS``, then spilled to ``SPILL_BUCKETS`` files by grid code
    (memory bounded by one bucket). :meth:`close` removes the files."""

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

    @property
    def in_memory(self) -> bool:
        return self._dir is None

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
    """Maps a batch's user and grid codes to database ids and writes its records."""

    def __init__(self, session: Session, dataset: Dataset, secret: bytes) -> None:
        self.session = session
        self.dataset = dataset
        self.secret = secret
        self.grid_repo = GridRepository(session)
        self.bulk = IngestRepository(session)
        self.user_ids = np.empty(0, dtype=np.int64)  # by user code
        self.grid_ids = np.empty(0, dtype=np.int64)  # by grid code
        self.grids: list[_Grid] = []  # by grid code
        self.is_new = np.empty(0, dtype=bool)  # grid not stored before this upload, by code
        self.reread = np.empty(0, dtype=bool)  # stored grid to read back whole, by code
        self.slot_grids: dict[int, dict[int, _Grid]] = {}  # slot µs -> cell -> stored grid
        self.new_rows = NewGridRows()
        self.latest = np.empty(0, dtype=np.int64)  # latest stored time, by user code
        self.inserted = 0
        self.duplicates = 0
        self._ready: Iterator[GridSummary] | None = None  # summaries begun by prepare()

    # -------------------------------------------------------------- per batch
    def stage(self, batch: Batch) -> Callable[[], None]:
        """Map a batch to ids and find its duplicates; storing its records is what it returns,
        to be called before the next batch is staged."""
        if batch.new_users:
            hashes = [hash_user(self.secret, u) for u in batch.new_users]
            ids = self.bulk.user_ids(self.dataset.id, hashes)
            self.user_ids = np.concatenate([self.user_ids, np.array(ids, dtype=np.int64)])
            known = [_NEVER if t is None else t for t in self.bulk.latest_ts(self.dataset.id, ids)]
            self.latest = np.concatenate([self.latest, np.array(known, dtype=np.int64)])
        if batch.new_grids:
            self._add_grids(batch.new_grids)
        if not len(batch):
            return _nothing
        keep = first_occurrences(batch.user_codes, batch.ts_us)
        codes, user_codes = batch.grid_codes[keep], batch.user_codes[keep]
        ts, values = batch.ts_us[keep], batch.values[keep]
        # A row later than everything stored for its user cannot repeat a stored row.
        check = ts <= self.latest[user_codes]
        np.maximum.at(self.latest, user_codes, ts)
        users = self.user_ids[user_codes]
        stored = ~self.bulk.stored_already(self.dataset.id, users, ts, np.flatnonzero(check))
        n = int(np.count_nonzero(stored))
        self.inserted += n
        self.duplicates += len(batch) - n
        # a stored grid given a row earlier than its user's latest: its order is unknown here
        self.reread[codes[stored & check & ~self.is_new[codes]]] = True
        if n < len(stored):
            codes, users, ts, values = codes[stored], users[stored], ts[stored], values[stored]
        self.new_rows.add(codes, users, ts, values)
        grid_ids, dataset_id = self.grid_ids[codes], self.dataset.id
        return lambda: self.bulk.insert_records(dataset_id, grid_ids, users, ts, values)

    def _add_grids(self, keys: list[tuple[int, int]]) -> None:
        # Each slot's stored grids are loaded once per upload; a key not among them is
        # new (the dataset lock keeps other writers out).
        slots = sorted({s for _, s in keys} - self.slot_grids.keys())
        refuse_dropped_slots(self.dataset, slots)
        for s in slots:
            self.slot_grids[s] = {}
        if slots:
            rows = self.grid_repo.in_slots(self.dataset.id, [us_to_datetime(s) for s in slots])
            for gid, cell_str, slot_start, version, n_records in rows:
                slot = datetime_to_us(slot_start)
                self.slot_grids[slot][h3.str_to_int(cell_str)] = _Grid(
                    gid, version, n_records, slot
                )
        grids: list[_Grid | None] = [self.slot_grids[slot].get(cell) for cell, slot in keys]
        fresh = [i for i, g in enumerate(grids) if g is None]
        for i, gid in zip(fresh, self.bulk.allocate_grid_ids(len(fresh)), strict=True):
            cell, slot = keys[i]
            grids[i] = _Grid(gid, 0, 0, slot, cell=cell)
        added = [g for g in grids if g is not None]
        self.grids.extend(added)
        self.grid_ids = np.concatenate(
            [self.grid_ids, np.array([g.grid_id for g in added], dtype=np.int64)]
        )
        self.is_new = np.concatenate([self.is_new, [g.cell is not None for g in added]])
        self.reread = np.concatenate([self.reread, np.zeros(len(added), dtype=bool)])

    # ----------------------------------------------------------------- at end
    def prepare(self) -> None:
        """Sort the new rows into grids and start summarising them ahead of :meth:`finish`,
        with no SQL (so while the last records are stored): when every grid is new and the
        rows are in memory, as in a first upload of a period. Else :meth:`finish` does it."""
        if self._ready is None and self.new_rows.in_memory and self.is_new.all():
            rows = next(self.new_rows.groups(), None)
            if rows is not None:
                self._ready = _started(_extend(snapshot_records([]), rows, self.grid_ids))

    def finish(self) -> int:
        """Insert new grids and refresh changed ones (summary, snapshot, version + 1); how many. A
        grid whose every row was a duplicate is untouched."""
        self.bulk.attach_months(self.dataset.id)  # every record visible from here on
        by_id = {g.grid_id: g for g in self.grids}
        changed = 0
        if self._ready is not None:
            ready, self._ready = self._ready, None
            changed += self._store(by_id, ready, overlap=True)
        reread_users: dict[int, list[np.ndarray]] = {}  # grid code -> users of its new rows
        for rows in self.new_rows.groups():
            old = self._stored_snapshots(rows["code"])
            back = self.reread[rows["code"]]
            if back.any():
                for code, users in _users_by_code(rows[back]):
                    reread_users.setdefault(code, []).append(users)
                rows = rows[~back]
            changed += self._store(by_id, _extend(old, rows, self.grid_ids), overlap=True)
        return changed + self._store(by_id, self._read_back(reread_users))

    def _stored_snapshots(self, codes: np.ndarray) -> RecordArrays:
        """The records of the stored grids among ``codes`` from their snapshots (in stored order);
        one not at its version is marked to be read back."""
        wanted = np.unique(codes[~self.is_new[codes] & ~self.reread[codes]]).tolist()
        wanted = [c for c in wanted if self.grids[c].n_records]
        snaps = self.grid_repo.snapshot_rows(self.grid_ids[wanted].tolist()) if wanted else []
        code_of = {self.grids[c].grid_id: c for c in wanted}
        current = []
        for gid, version, users, counts, values in snaps:
            if version == self.grids[code_of[gid]].version:
                del code_of[gid]
                current.append((gid, users, counts, values))
        self.reread[list(code_of.values())] = True
        return snapshot_records(current)

    def _read_back(self, new_users: dict[int, list[np.ndarray]]) -> Iterator[GridSummary]:
        """The summaries of stored grids read back whole from the database: every record
        of a user of the grid (stored or new) in its slot's time range, one slot at a time."""
        if not new_users:
            return
        codes = sorted(new_users)
        ids = self.grid_ids[codes].tolist()
        old_users = self.grid_repo.snapshot_users(ids)
        by_slot: dict[int, list[int]] = {}
        for c in codes:
            by_slot.setdefault(self.grids[c].slot_us, []).append(c)
        tz = get_zone(self.dataset.timezone)
        minutes = self.dataset.timeslot_minutes
        for slot, slot_codes in sorted(by_slot.items()):
            grid_ids = [self.grids[c].grid_id for c in slot_codes]
            users: list[int] | None = np.unique(np.concatenate(
                [a for c in slot_codes for a in new_users[c]]
                + [old_users.get(g, (0, _NO_USERS))[1] for g in grid_ids]
            )).tolist()  # fmt: skip
            if any(
                self.grids[c].n_records and old_users.get(g, (None,))[0] != self.grids[c].version
                for c, g in zip(slot_codes, grid_ids, strict=True)
            ):
                users = None  # a stored grid without its snapshot: every user
            end = int(slot_end_bound_us(np.array([slot]), tz, minutes)[0])
            rec = copy_records(self.session, self.dataset.id, grid_ids, users, slot, end)
            rec = rec.sorted()
            yield from summarise_grids(rec.grid_ids, rec.user_ids, rec.values)

    def _store(
        self, by_id: dict[int, _Grid], summaries: Iterator[GridSummary], *, overlap: bool = False
    ) -> int:
        """Write the grids whose record count changed, ``STORE_GRIDS`` at a time (with
        ``overlap``, on a helper thread while the next part is summarised)."""
        changed = 0
        writing: Future[int] | None = None
        new_grids, new_snaps, old_grids, old_snaps = [], [], [], []
        with ThreadPoolExecutor(1, thread_name_prefix="dpgate-grids") as pool:
            try:
                for s in summaries:
                    grid = by_id[s.grid_id]
                    if s.n_records == grid.n_records:
                        continue  # only duplicates arrived: unchanged
                    version = grid.version + 1
                    snap = (s.grid_id, version, s.user_ids, s.counts, s.values)
                    summary = (s.n_users, s.n_records, s.max_user_records, version)
                    if grid.cell is None:
                        old_grids.append((s.grid_id, *summary))
                        old_snaps.append(snap)
                    else:
                        new_grids.append((s.grid_id, "", grid.cell, grid.slot_us, *summary))
                        new_snaps.append(snap)
                    if len(new_grids) + len(old_grids) >= STORE_GRIDS:
                        if writing is not None:
                            changed += writing.result()  # one part in flight at most
                        part = (new_grids, new_snaps, old_grids, old_snaps)
                        if overlap:
                            writing = pool.submit(self._flush, *part)
                        else:
                            changed += self._flush(*part)
                            writing = None
                        new_grids, new_snaps, old_grids, old_snaps = [], [], [], []
            finally:
                if writing is not None:  # the session is this thread's again after it
                    changed += writing.result()
        return changed + self._flush(new_grids, new_snaps, old_grids, old_snaps)

    def _flush(self, new_grids: list, new_snaps: list, old_grids: list, old_snaps: list) -> int:
        ids = public_ids(len(new_grids))
        # by (slot, cell): most of the grid indexes then take their entries in key order
        new_grids = [
            (g[0], p, h3.int_to_str(g[2]), *g[3:])
            for g, p in zip(sorted(new_grids, key=lambda g: (g[3], g[2])), ids, strict=True)
        ]
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


def _extend(old: RecordArrays, rows: np.ndarray, grid_ids: np.ndarray) -> Iterator[GridSummary]:
    """The summaries of the grids of ``old`` (stored records) and ``rows`` (new, by grid code):
    per grid and user, stored records first, then new ones by time."""
    gids = np.concatenate([old.grid_ids, grid_ids[rows["code"]]])
    users = np.concatenate([old.user_ids, rows["user"]])
    ts = np.concatenate([old.ts_us, rows["ts"]])
    values = np.concatenate([old.values, rows["value"]])
    if old.grid_ids.size:
        phase = np.concatenate([np.zeros(old.grid_ids.size, bool), np.ones(rows.size, bool)])
        order = np.lexsort((ts, phase, users, gids))
    elif np.all((users[1:] > users[:-1]) | ((users[1:] == users[:-1]) & (ts[1:] > ts[:-1]))):
        order = np.argsort(gids, kind="stable")  # already by (user, time), as batches come
    else:
        order = np.lexsort((ts, users, gids))
    return summarise_grids(gids[order], users[order], values[order])


def _started(summaries: Iterator[GridSummary]) -> Iterator[GridSummary]:
    """``summaries`` with their first computed now (the arrays of them all with it)."""
    first = next(summaries, None)
    return iter(()) if first is None else itertools.chain([first], summaries)


def _nothing() -> None:
    return None


def _users_by_code(rows: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """``(grid code, its users)`` for the grids of ``rows``."""
    pairs = np.unique(np.stack([rows["code"], rows["user"]], axis=1), axis=0)
    bounds = np.flatnonzero(np.diff(pairs[:, 0])) + 1
    for part in np.split(pairs, bounds):
        yield int(part[0, 0]), part[:, 1]
