"""Pause the cyclic garbage collector while a slot release runs.

A whole-slot release allocates some 10^6 short-lived containers (answers, drafts,
OpenDP conversions) and keeps ~10^5 of them until it answers: the collector ran ~1,000
young and 3 full collections per 10^6-record release, the full ones walking every
object of the process (0.5-0.9 s of a ~5 s release, `benchmarks/release.py`).
Reference counting still frees everything acyclic meanwhile; cyclic garbage waits for
the first collection after the pause. Nested and concurrent pauses (threads) are
counted: the collector is re-enabled when the last one ends, and only if it was
enabled when the first began.
"""

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
