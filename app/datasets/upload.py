"""Uploading raw records: one CSV stream, one transaction, exact tallies.

The caller owns the transaction (the request's session): everything here is
flushed into it and nothing is committed, so any error (a malformed file, a body
over the limit, a crash) leaves the dataset exactly as it was.
"""

from __future__ import annotations

import hashlib
import hmac
import queue
import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import h3
import numpy as np
from sqlalchemy.orm import Session

from app.datasets.grid_store import GridState, rebuild_grids
from app.datasets.models import Dataset, Upload
from app.datasets.repository import DatasetRepository, GridRepository, IngestRepository
from app.datasets.schemas import RowError, UploadResult
from app.errors import InvalidRequest, NotFound
from app.ingest.csv_records import (
    MAX_REPORTED_ERRORS,
    Batch,
    ColumnMap,
    CsvFormatError,
    ParseOptions,
    RecordReader,
)
from app.ingest.timeslots import datetime_to_us, get_zone, us_to_datetime

__all__ = ["BATCH_ROWS", "UploadOptions", "hash_user", "upload_records"]

#: Kept rows per batch (parsed, then written with one bulk statement).
BATCH_ROWS = 50_000


@dataclass(frozen=True)
class UploadOptions:
    columns: ColumnMap = field(default_factory=ColumnMap)
    drop_zero: bool = False
    out_of_range: Literal["clamp", "reject"] = "clamp"
    delimiter: str = ","


def hash_user(secret: bytes, user_id: str) -> str:
    """The stored form of a user identifier: HMAC-SHA256 with the service secret, hex."""
    return hmac.new(secret, user_id.encode(), hashlib.sha256).hexdigest()


class _Ingestor:
    """Maps a batch's users and grids to ids (creating them) and writes its records."""

    def __init__(self, session: Session, dataset: Dataset, secret: bytes) -> None:
        self.dataset = dataset
        self.secret = secret
        self.datasets = DatasetRepository(session)
        self.grid_repo = GridRepository(session)
        self.bulk = IngestRepository(session)
        self.user_ids: dict[str, int] = {}
        self.grid_ids: dict[tuple[int, int], int] = {}  # (h3 cell as int, slot µs) -> id
        self.states: dict[int, GridState] = {}  # every grid seen in a loaded slot
        self.loaded_slots: set[int] = set()
        self.touched: dict[int, GridState] = {}

    def write(self, batch: Batch) -> int:
        if not len(batch):
            return 0
        users = self._users(batch.users)
        grids = self._grids(batch.cells, batch.slots_us)
        return self.bulk.insert_records(self.dataset.id, grids, users, batch.ts_us, batch.values)

    def _users(self, raw: list[str]) -> np.ndarray:
        known = self.user_ids
        new = {u for u in set(raw) if u not in known}
        if new:
            by_hash = {hash_user(self.secret, u): u for u in new}
            hashes = list(by_hash)
            found = self.datasets.user_ids(self.dataset.id, hashes)
            missing = [h for h in hashes if h not in found]
            if missing:
                found.update(self.datasets.add_users(self.dataset.id, missing))
            for h, i in found.items():
                known[by_hash[h]] = i
        return np.fromiter(map(known.__getitem__, raw), dtype=np.int64, count=len(raw))

    def _grids(self, cells: np.ndarray, slots: np.ndarray) -> np.ndarray:
        keys, inverse = np.unique(np.stack([cells, slots], axis=1), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        pairs = [(c, s) for c, s in keys.tolist()]
        missing = [p for p in pairs if p not in self.grid_ids]
        if missing:
            self._resolve_grids(missing)
        ids = np.array([self.grid_ids[p] for p in pairs], dtype=np.int64)
        per_grid = np.bincount(inverse, minlength=len(pairs)).tolist()
        for gid, n in zip(ids.tolist(), per_grid, strict=True):
            state = self.touched.get(gid)
            if state is None:
                state = self.touched[gid] = self.states[gid]
            state.attempted += n
        return ids[inverse]

    def _resolve_grids(self, missing: list[tuple[int, int]]) -> None:
        # Load each slot's existing grids once per upload; after that, a key still
        # missing in a loaded slot is new (the dataset lock keeps others out).
        slots = sorted({s for _, s in missing} - self.loaded_slots)
        if slots:
            for gid, cell, slot, version, n_records in self.grid_repo.in_slots(
                self.dataset.id, [us_to_datetime(s) for s in slots]
            ):
                self.grid_ids[(h3.str_to_int(cell), datetime_to_us(slot))] = gid
                self.states[gid] = GridState(version=version, n_records=n_records)
            self.loaded_slots.update(slots)
        new = [k for k in missing if k not in self.grid_ids]
        if not new:
            return
        cells = [h3.int_to_str(c) for c, _ in new]
        public_ids = [secrets.token_urlsafe(12) for _ in new]
        ids = self.bulk.add_grids(self.dataset.id, cells, [s for _, s in new], public_ids)
        for key, pid in zip(new, public_ids, strict=True):
            gid = ids[pid]
            self.grid_ids[key] = gid
            self.states[gid] = GridState(version=0, n_records=0)


class _Writer:
    """Writes batches on a helper thread while the caller parses the next ones.

    The queue holds at most ``depth`` batches, so memory stays bounded. The
    session is used by this thread only between :meth:`submit` calls and
    :meth:`close`, which waits for it: the caller touches the session again only
    after ``close`` returns (also on error).
    """

    _STOP = object()

    def __init__(self, write: Callable[[Batch], int], depth: int = 2) -> None:
        self._write = write
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.inserted = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="dpgate-ingest-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            if self.error is None:
                try:
                    self.inserted += self._write(item)
                except BaseException as exc:  # re-raised in the caller's thread
                    self.error = exc

    def submit(self, batch: Batch) -> None:
        if self.error is not None:
            raise self.error
        self._queue.put(batch)

    def close(self) -> None:
        """Wait until every submitted batch is written; re-raise a writer error."""
        self._queue.put(self._STOP)
        self._thread.join()
        if self.error is not None:
            raise self.error


def upload_records(
    session: Session,
    dataset_id: int,
    chunks: Iterable[bytes],
    options: UploadOptions,
    *,
    hash_secret: bytes,
    idempotency_key: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Ingest a CSV byte stream into a dataset inside the caller's transaction.

    Locks the dataset (uploads to one dataset are serialised). With an
    ``idempotency_key`` already used for this dataset, reads nothing and returns
    the stored first answer. Returns ``(answer, replayed)``; the answer is an
    :class:`UploadResult` as a dict. Raises ``NotFound``, ``InvalidRequest`` (the
    file as a whole is unreadable); exceptions from ``chunks`` propagate.
    """
    datasets = DatasetRepository(session)
    dataset = datasets.lock(dataset_id)
    if dataset is None:
        raise NotFound(f"no dataset {dataset_id}")
    if idempotency_key is not None:
        previous = datasets.upload_by_key(dataset.id, idempotency_key)
        if previous is not None:
            return dict(previous.response), True

    parse = ParseOptions(
        value_bound=dataset.value_bound,
        h3_resolution=dataset.h3_resolution,
        timeslot_minutes=dataset.timeslot_minutes,
        timezone=get_zone(dataset.timezone),
        columns=options.columns,
        drop_zero=options.drop_zero,
        reject_out_of_range=options.out_of_range == "reject",
        delimiter=options.delimiter,
    )
    ingestor = _Ingestor(session, dataset, hash_secret)
    rows = rejected = clamped = dropped = kept = 0
    errors: list[tuple[int, str]] = []
    writer = _Writer(ingestor.write)
    try:
        try:
            reader = RecordReader(chunks, parse)
            for batch in reader.batches(BATCH_ROWS):
                rows += batch.rows
                rejected += batch.rejected
                clamped += batch.clamped
                dropped += batch.dropped_zero
                errors.extend(batch.errors[: MAX_REPORTED_ERRORS - len(errors)])
                kept += len(batch)
                writer.submit(batch)
        finally:
            writer.close()  # the session is ours again only after this
    except CsvFormatError as exc:
        raise InvalidRequest(f"cannot read the CSV: {exc}") from None
    inserted = writer.inserted

    changed = rebuild_grids(session, ingestor.touched)
    answer = UploadResult(
        accepted=inserted,
        rejected=rejected,
        clamped=clamped,
        duplicates=kept - inserted,
        dropped_zero=dropped,
        rows=rows,
        grids_updated=changed,
        errors=[RowError(line=line, reason=reason) for line, reason in errors],
    ).model_dump(mode="json")
    datasets.add_upload(
        Upload(dataset_id=dataset.id, idempotency_key=idempotency_key, response=answer)
    )
    return answer, False
