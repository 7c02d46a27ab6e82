"""Pause the cyclic garbage collector while a slot release runs (its full collections took 0.5-0.9
s of a ~5 s release). Nested and concurrent pauses are counted; the collector is re-enabled when
the last ends, if it was enabled before."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]

_LOCK = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with the cyclic collector disabled (see module docstring)."""
    global _depth, _was_enabled
    with _LOCK:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
