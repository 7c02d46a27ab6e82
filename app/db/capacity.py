"""How many requests of a server process use the database at once (docs/architecture.md).

A **general** capacity (``db_pool_size``) and a **heavy** one (``heavy_concurrency``: releases,
previews, uploads), so cheap requests never queue behind releases. Each is entered before a
connection is taken; one not admitted within ``db_deadline_seconds`` answers 503 with
``Retry-After``. When the last heavy holder leaves, the C heap is trimmed (``malloc_trim``)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import math
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio import CapacityLimiter

from app.kit.errors import Unavailable

#: Weight of the newest hold in the mean hold time.
_SMOOTHING = 0.2


def _malloc_trim() -> None:
    name = ctypes.util.find_library("c")
    if name is None:
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(name).malloc_trim(0)


class Capacity:
    """At most ``slots`` holders; a wait lasts at most ``deadline`` seconds, then 503."""

    def __init__(self, slots: int, deadline: float, *, what: str, trim: bool = False) -> None:
        self.limiter = CapacityLimiter(slots)
        self.deadline = deadline
        self.what = what
        self.trim = trim
        self.mean_hold = 1.0

    @property
    def total(self) -> int:
        return int(self.limiter.total_tokens)

    def retry_after(self) -> int:
        return max(1, min(60, math.ceil(self.mean_hold)))

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold a slot for the block, or raise ``Unavailable`` after ``deadline``."""
        admitted = False
        with anyio.move_on_after(self.deadline):
            await self.limiter.acquire()
            admitted = True
        if not admitted:
            raise Unavailable(
                f"the server is busy with {self.what}: no turn within {self.deadline:g} s; "
                f"retry in {self.retry_after()} s",
                retry_after=self.retry_after(),
            )
        start = time.monotonic()
        try:
            yield
        finally:
            self.limiter.release()
            held = time.monotonic() - start
            self.mean_hold += _SMOOTHING * (held - self.mean_hold)
            if self.trim and self.limiter.borrowed_tokens == 0:
                threading.Thread(target=_malloc_trim, daemon=True).start()
