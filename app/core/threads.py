"""A second thread for work that releases the GIL: OpenDP's samplers (its calls through
ctypes release it) and the compiled Clip-User kernel (``nogil``). A machine with two
cores then draws a day release's noise, or makes two plans, in about half the time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["in_parallel"]

A = TypeVar("A")
B = TypeVar("B")

_SECOND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpgate-second")
_on_second = threading.local()


def _marked(fn: Callable[[], B]) -> B:
    _on_second.active = True
    try:
        return fn()
    finally:
        _on_second.active = False


def in_parallel(first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """``(first(), second())``, ``second`` run on the second thread meanwhile (in turn when
    called from that thread itself, which must not wait for itself). Both have finished
    when this returns or raises; an error of ``first`` is raised before one of ``second``."""
    if getattr(_on_second, "active", False):
        return first(), second()
    later = _SECOND.submit(_marked, second)
    try:
        a = first()
    except BaseException:
        later.exception()  # wait for it; its own error, if any, is dropped for first's
        raise
    return a, later.result()
