"""The upload's writer thread (``app.uploads.writer.BatchWriter``): order, joining of queued
batches, the caller going on while the last records are stored, errors (no database)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.ingest.batches import Batch
from app.uploads.writer import BatchWriter


def batch(first: int, n: int) -> Batch:
    rows = np.arange(first, first + n)
    return Batch(
        rows, rows % 3, rows * 10, rows / 2, new_users=[f"u{first}"],
        new_grids=[(first, 0)], rows=n + 1, rejected=1, errors=[(first, "bad")],
    )  # fmt: skip


def test_batches_queued_while_one_is_stored_are_joined_in_order() -> None:
    staged: list[Batch] = []
    release = threading.Event()

    def stage(b: Batch):
        staged.append(b)
        return release.wait if len(staged) == 1 else lambda: None

    writer = BatchWriter(stage, depth=4, join_rows=100)
    writer.submit(batch(0, 2))
    while not staged:
        threading.Event().wait(0.001)
    for first in (2, 5, 9):  # queued while the first is stored
        writer.submit(batch(first, first))
    release.set()
    writer.close()
    assert [len(b) for b in staged] == [2, 2 + 5 + 9]
    joined = staged[1]
    assert joined.user_codes.tolist() == list(range(2, 4)) + list(range(5, 10)) + list(range(9, 18))
    assert joined.ts_us.tolist() == [10 * u for u in joined.user_codes.tolist()]
    assert joined.new_users == ["u2", "u5", "u9"] and joined.new_grids == [(2, 0), (5, 0), (9, 0)]
    assert (joined.rows, joined.rejected) == (3 + 6 + 10, 3)
    assert joined.errors == [(2, "bad"), (5, "bad"), (9, "bad")]


def test_joining_stops_at_join_rows() -> None:
    staged: list[int] = []
    release = threading.Event()

    def stage(b: Batch):
        staged.append(len(b))
        return release.wait if len(staged) == 1 else lambda: None

    writer = BatchWriter(stage, depth=8, join_rows=10)
    writer.submit(batch(0, 1))
    while not staged:
        threading.Event().wait(0.001)
    for i in range(6):
        writer.submit(batch(10 * i, 4))
    release.set()
    writer.close()
    assert staged == [1, 12, 12]


def test_the_caller_goes_on_while_the_last_records_are_stored() -> None:
    stored = threading.Event()
    release = threading.Event()

    def store() -> None:
        release.wait()
        stored.set()

    writer = BatchWriter(lambda b: store, depth=2, join_rows=10)
    writer.submit(batch(0, 3))
    writer.finish_staging()  # returns though the store waits
    assert not stored.is_set()
    release.set()
    writer.close()
    assert stored.is_set()


def test_a_staging_error_is_raised_and_later_batches_are_not_staged() -> None:
    staged: list[int] = []

    def stage(b: Batch):
        staged.append(len(b))
        raise RuntimeError("disk on fire")

    writer = BatchWriter(stage, depth=2, join_rows=1)
    writer.submit(batch(0, 1))
    writer.finish_staging()
    with pytest.raises(RuntimeError, match="disk on fire"):
        writer.submit(batch(1, 1))
    with pytest.raises(RuntimeError, match="disk on fire"):
        writer.close()
    assert staged == [1]


def test_a_discarding_close_skips_the_queued_batches() -> None:
    staged: list[int] = []
    release = threading.Event()

    def stage(b: Batch):
        staged.append(len(b))
        return release.wait

    writer = BatchWriter(stage, depth=4, join_rows=1)
    writer.submit(batch(0, 1))
    while not staged:
        threading.Event().wait(0.001)
    writer.submit(batch(1, 2))
    threading.Timer(1.0, release.set).start()  # after close has asked to discard
    writer.close(discard=True)
    assert staged == [1]
