"""A second thread for work that releases the GIL: OpenDP's samplers (its calls through
ctypes release it) and the compiled Clip-User kernel (``nogil``). A machine with two
cores then draws a day release's noise, or makes two plans, in about half the time.

There is one second thread per process and nobody waits for it: when it is busy (another
request's half), the caller does both halves itself, as it does when called from the
second thread. So a small request never queues behind a large one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["in_parallel"]

A = TypeVar("A")
B = TypeVar("B")

_SECOND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpgate-second")
_FREE = threading.Semaphore(1)  # held while the second thread runs a half
_on_second = threading.local()


def _run_second(fn: Callable[[], B]) -> B:
    _on_second.active = True
    try:
        return fn()
    finally:
        _on_second.active = False
        _FREE.release()


def in_parallel(first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """``(first(), second())``, ``second`` run on the second thread meanwhile if it is free
    (else both here, in turn; the second thread never waits for itself). Both have finished
    when this returns or raises; an error of ``first`` is raised before one of ``second``."""
    if getattr(_on_second, "active", False) or not _FREE.acquire(blocking=False):
        return first(), second()
    later = _SECOND.submit(_run_second, second)
    try:
        a = first()
    except BaseException:
        later.exception()  # wait for it; its own error, if any, is dropped for first's
        raise
    return a, later.result()
