"""The writing side of an upload: a helper thread that stages each parsed batch (ids, duplicates:
the SQL that must precede its records) and then stores its records, while the caller parses the
next. Batches that queue up while one is stored are joined into one write: fewer statements and
waits between them when the database is the slower side."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from app.ingest.batches import Batch

#: What staging a batch returns: storing its records.
Store = Callable[[], None]


class BatchWriter:
    """Stages and stores batches in their order on a helper thread (at most ``depth`` queued;
    queued ones joined up to ``join_rows`` kept rows). The caller touches the session again only
    after :meth:`close`; between :meth:`finish_staging` and :meth:`close` it may work on what
    the staging built while the last records are stored."""

    _STOP = object()

    def __init__(self, stage: Callable[[Batch], Store], *, depth: int, join_rows: int) -> None:
        self._stage = stage
        self._join_rows = join_rows
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self._discard = False
        self._submitted = 0
        self._taken = 0
        self._closing = threading.Event()
        self._staged = threading.Event()  # every batch staged (or the writer stopped)
        self._thread = threading.Thread(target=self._run, name="dpgate-ingest-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while (batches := self._take()) is not None:
                if self.error is not None or self._discard:
                    continue
                try:
                    store = self._stage(Batch.joined(batches))
                    if self._closing.is_set() and self._taken == self._submitted:
                        self._staged.set()  # the last: the caller may go on meanwhile
                    store()
                except BaseException as exc:  # re-raised in the caller's thread
                    self.error = exc
        finally:
            self._staged.set()

    def _take(self) -> list[Batch] | None:
        """The next batch and those queued behind it (up to ``join_rows``); None at the end."""
        item = self._queue.get()
        if item is self._STOP:
            return None
        batches, rows = [item], len(item)
        while rows < self._join_rows:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is self._STOP:
                self._queue.put(item)  # seen again by the next take
                break
            batches.append(item)
            rows += len(item)
        self._taken += len(batches)
        return batches

    def submit(self, batch: Batch) -> None:
        if self.error is not None:
            raise self.error
        self._submitted += 1
        self._queue.put(batch)

    def finish_staging(self) -> None:
        """No more batches: wait until the last is staged (its records may still be going in)."""
        self._end()
        self._staged.wait()

    def close(self, *, discard: bool = False) -> None:
        """Wait until every submitted batch is written (``discard``: skip the queued ones, for
        an upload that failed); re-raise a writer error."""
        if discard:
            self._discard = True
        self._end()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _end(self) -> None:
        if not self._closing.is_set():
            self._closing.set()
            self._queue.put(self._STOP)
