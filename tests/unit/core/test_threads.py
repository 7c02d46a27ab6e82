"""The second thread (app/core/noise/threads.py): both results, both finished, errors raised,
and a call from the second thread itself runs in turn instead of waiting for itself."""

from __future__ import annotations

import threading
import time

import pytest

from app.core.noise.threads import in_parallel


def test_both_run_and_the_second_on_another_thread() -> None:
    here = threading.get_ident()
    a, b = in_parallel(lambda: threading.get_ident(), lambda: threading.get_ident())
    assert a == here and b != here


def test_the_two_overlap_in_time() -> None:
    started = time.perf_counter()
    in_parallel(lambda: time.sleep(0.3), lambda: time.sleep(0.3))
    assert time.perf_counter() - started < 0.55


def test_errors_are_raised_after_both_finished() -> None:
    done: list[str] = []

    def slow() -> None:
        time.sleep(0.2)
        done.append("second")

    def fail() -> None:
        raise KeyError("first")

    with pytest.raises(KeyError, match="first"):
        in_parallel(fail, slow)
    assert done == ["second"]
    with pytest.raises(ValueError, match="second"):
        in_parallel(
            lambda: done.append("first"), lambda: (_ for _ in ()).throw(ValueError("second"))
        )
    assert done[-1] == "first"


def test_a_call_from_the_second_thread_runs_in_turn() -> None:
    def nested() -> tuple[int, int]:
        return in_parallel(lambda: 1, lambda: 2)

    assert in_parallel(lambda: 0, nested) == (0, (1, 2))


def test_a_busy_second_thread_is_not_waited_for() -> None:
    """While another caller's long half runs on the second thread, a small call does both
    halves itself at once instead of queueing behind it."""
    busy = threading.Event()
    release = threading.Event()

    def long_half() -> None:
        busy.set()
        release.wait(5.0)

    other = threading.Thread(target=lambda: in_parallel(lambda: None, long_half))
    other.start()
    try:
        assert busy.wait(5.0)
        here = threading.get_ident()
        started = time.perf_counter()
        a, b = in_parallel(lambda: threading.get_ident(), lambda: threading.get_ident())
        assert a == b == here and time.perf_counter() - started < 0.5
    finally:
        release.set()
        other.join()
