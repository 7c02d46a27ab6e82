"""Uploading raw records: one CSV stream or GTFS-Realtime feed, one transaction (the caller's:
nothing is committed here), exact tallies.

The caller parses batches while a helper thread maps and writes them
(:class:`app.uploads.ingestor.Ingestor`); a body of at least :data:`PARSE_PROCESS_MIN_BYTES` is
parsed in a child process (:mod:`app.ingest.parse_process`) with the same batches. Memory is
bounded by a few batches, the distinct users and grids, and the rows kept for new grids'
snapshots."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.orm import Session

from app.datasets.coarse import refresh_after_upload
from app.datasets.models import Dataset, Upload
from app.datasets.repository import DatasetRepository
from app.idempotency.service import BodyHasher, RequestIdentity, check_same_request
from app.ingest.batches import Batch
from app.ingest.csv_records import (
    MAX_REPORTED_ERRORS,
    ColumnMap,
    CsvFormatError,
    ParseOptions,
    RecordReader,
)
from app.ingest.gtfs_realtime import FeedFormatError, FeedReader
from app.ingest.parse_process import feed_pieces, parse_in_child
from app.kit.errors import InvalidRequest, NotFound
from app.time.slots import get_zone
from app.uploads.ingestor import Ingestor
from app.uploads.retention import apply_retention
from app.uploads.schemas import RowError, UploadResult

#: Kept rows per batch (parsed, then written with one bulk statement).
BATCH_ROWS = 50_000
#: A body at least this large (its declared size; a feed's joined size) is parsed in a
#: child process: below it, the process start would cost more than it saves.
PARSE_PROCESS_MIN_BYTES = 4 << 20

#: The body's format: CSV text, or one serialized GTFS-Realtime ``FeedMessage``.
RecordFormat = Literal["csv", "gtfs-rt"]


@dataclass(frozen=True)
class UploadOptions:
    format: RecordFormat = "csv"
    columns: ColumnMap = field(default_factory=ColumnMap)
    drop_zero: bool = False
    out_of_range: Literal["clamp", "reject"] = "clamp"
    delimiter: str = ","


class _Writer:
    """Writes batches on a helper thread while the caller parses the next (at most ``depth``
    queued); the caller touches the session again only after :meth:`close`."""

    _STOP = object()

    def __init__(self, write: Callable[[Batch], None], depth: int = 2) -> None:
        self._write = write
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
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
                    self._write(item)
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


@dataclass
class _Tally:
    """An upload's counts and first errors, summed over its batches in order."""

    rows: int = 0
    rejected: int = 0
    clamped: int = 0
    dropped: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)

    def add(self, batch: Batch) -> None:
        self.rows += batch.rows
        self.rejected += batch.rejected
        self.clamped += batch.clamped
        self.dropped += batch.dropped_zero
        self.errors.extend(batch.errors[: MAX_REPORTED_ERRORS - len(self.errors)])

    def and_write(self, ingestor: Ingestor) -> Callable[[Batch], None]:
        """Count each batch, then write it."""

        def consume(batch: Batch) -> None:
            self.add(batch)
            ingestor.write(batch)

        return consume


def upload_records(
    session: Session,
    dataset_id: int,
    chunks: Iterable[bytes],
    options: UploadOptions,
    *,
    hash_secret: bytes,
    idempotency_key: str | None = None,
    request: RequestIdentity | None = None,
    body_size: int | None = None,
) -> tuple[dict[str, Any], bool]:
    """Ingest a CSV stream (or a feed's bytes) into a dataset in the caller's transaction, under
    the dataset lock; ``(answer, replayed)``.

    A used ``idempotency_key`` writes nothing and returns the first answer for the same body and
    ``request``, else ``IdempotencyConflict``. ``NotFound``, ``InvalidRequest`` (unreadable file,
    a value filter not allowed); ``chunks``' errors propagate. ``body_size`` decides whether a CSV
    is parsed in a child process."""
    datasets = DatasetRepository(session)
    dataset = datasets.lock(dataset_id)
    if dataset is None:
        raise NotFound(f"no dataset {dataset_id}")
    check_value_filters(dataset, options)
    if idempotency_key is not None:
        previous = datasets.upload_by_key(dataset.id, idempotency_key)
        if previous is not None:
            return replay_upload(previous, chunks, request), True
    body = BodyHasher(chunks)

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
    ingestor = Ingestor(session, dataset, hash_secret)
    tally = _Tally()
    try:
        try:
            feed = b"".join(body) if options.format == "gtfs-rt" else None
            size = len(feed) if feed is not None else body_size
            if size is not None and size >= PARSE_PROCESS_MIN_BYTES:
                # the batches are counted and written on a helper thread, in their order
                pieces = body if feed is None else feed_pieces(feed)
                parse_in_child(pieces, options.format, parse, BATCH_ROWS, tally.and_write(ingestor))
            else:
                _parse_here(body if feed is None else feed, parse, tally, ingestor)
        finally:
            body.drain()
        changed = ingestor.finish()
        refresh_after_upload(session, dataset, ingestor.slot_grids if changed else ())
        apply_retention(session, dataset)
    except CsvFormatError as exc:
        raise InvalidRequest(f"cannot read the CSV: {exc}") from None
    except FeedFormatError as exc:
        raise InvalidRequest(str(exc)) from None
    finally:
        ingestor.new_rows.close()

    answer = UploadResult(
        accepted=ingestor.inserted,
        rejected=tally.rejected,
        clamped=tally.clamped,
        duplicates=ingestor.duplicates,
        dropped_zero=tally.dropped,
        rows=tally.rows,
        grids_updated=changed,
        errors=[RowError(line=line, reason=reason) for line, reason in tally.errors],
    ).model_dump(mode="json")
    request_hash = None if request is None else request.digest(body.hexdigest())
    datasets.add(
        Upload(
            dataset_id=dataset.id,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
            response=answer,
        )
    )
    return answer, False


def _parse_here(
    body: Iterable[bytes] | bytes, parse: ParseOptions, tally: _Tally, ingestor: Ingestor
) -> None:
    """Parse in this thread while a helper thread writes."""
    writer = _Writer(ingestor.write)
    try:
        reader = FeedReader(body, parse) if isinstance(body, bytes) else RecordReader(body, parse)
        for batch in reader.batches(BATCH_ROWS):
            tally.add(batch)
            writer.submit(batch)
    finally:
        writer.close()  # the session is ours again only after this


def check_value_filters(dataset: Dataset, options: UploadOptions) -> None:
    """Refuse the filters that decide from a value whether a record exists, unless the
    dataset declared them public (they would make the public occupancy depend on values)."""
    used = [
        name
        for name, on in (
            ("drop_zero=true", options.drop_zero),
            ("out_of_range=reject", options.out_of_range == "reject"),
        )
        if on
    ]
    if used and not dataset.value_filters_public:
        raise InvalidRequest(
            f"{' and '.join(used)} decide(s) from values which records exist, so the public "
            "occupancy (grid listing, who is charged) would depend on values; allowed only "
            "for a dataset created with value_filters_public: true"
        )


def replay_upload(previous: Upload, chunks: Iterable[bytes], request: RequestIdentity | None):
    """The first answer for a retried upload, after checking the body is the same one."""
    if request is not None and previous.request_hash is not None:
        body = BodyHasher(chunks)
        body.drain()
        check_same_request(previous.request_hash, request.digest(body.hexdigest()))
    return dict(previous.response)
