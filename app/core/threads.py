"""Two cores for OpenDP's samplers: a list of independent draws split across two threads.

OpenDP's library calls (``ctypes``) release the GIL while they sample, so a slot
release's ~10⁵ Laplace draws and noisy maxes run on both cores of the server. Each
draw is still one invocation of the same certified measurement, with fresh randomness
from OpenDP's CSPRNG: which thread makes it, and in which order, does not change its
law nor the independence of the draws (docs/math.md §9.4.9).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["split_across_threads"]

T = TypeVar("T")
R = TypeVar("R")

#: Below this much work a second thread costs more than it saves.
MIN_SPLIT = 2000
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpgate-draws")


def split_across_threads(
    run: Callable[[list[T]], list[R]],
    items: list[T],
    weight: Callable[[T], int] | None = None,
) -> list[R]:
    """``run(items)``, as ``run(first part) + run(second part)`` with the second part in a
    worker thread when there is enough work (``weight`` of each item, else 1)."""
    sizes = [1] * len(items) if weight is None else [weight(x) for x in items]
    total = sum(sizes)
    if total < MIN_SPLIT or len(items) < 2:
        return run(items)
    acc, cut = 0, 0
    while cut < len(items) and 2 * acc < total:
        acc += sizes[cut]
        cut += 1
    later = _POOL.submit(run, items[cut:])
    first = run(items[:cut])
    return first + later.result()
