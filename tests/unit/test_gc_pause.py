"""``app.kit.gc_pause``: nested and concurrent pauses, and the collector's prior state kept."""

from __future__ import annotations

import gc
import threading

import pytest

from app.kit.gc_pause import gc_paused


def test_nested_pauses_restore_the_collector_once() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still runs
    assert gc.isenabled()


def test_an_error_still_restores_the_collector() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_in_threads() -> None:
    """The first pause to end does not re-enable the collector under the other."""
    inside, release_first = threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with gc_paused():
            inside.set()
            release_first.wait(5)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(5)
    with gc_paused():
        release_first.set()
        t.join(5)
        seen.append(gc.isenabled())  # first ended; this pause still holds
    assert seen == [False] and gc.isenabled()
