"""Public per-grid occupancy, prepared once: counts, caps, sorted orders and sums.

Everything a mechanism decides (who is kept, array groupings, thresholds) is a
function of this object alone, never of a value (docs/math.md §1.4). It is cached in a small
LRU keyed by the counts and caps so that a plan and the release that follows it,
or repeated releases of one grid, share the sorting and the array groupings.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["CountsInfo", "int_array", "prepare_counts"]


def int_array(a: npt.ArrayLike, name: str) -> np.ndarray:
    """``a`` as a fresh non-empty 1-d int64 array of non-negative integers, else ``ValueError``."""
    arr = np.asarray(a)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d array")
    if not np.issubdtype(arr.dtype, np.integer):
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"{name} must hold integers")
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must hold integers")
    out = arr.astype(np.int64)
    if np.any(out < 0):
        raise ValueError(f"{name} must be non-negative")
    return out


@dataclass(frozen=True, eq=False)
class CountsInfo:
    """Occupancy of one grid after caps: ``eff[l] = min(m_l, caps_l)``.

    ``n`` is the grid's full record count (biases are always relative to the mean
    or variance of *all* records); ``n_active`` (``L``), ``m_min``, ``m_max`` and the sorted order
    refer to the active users (``eff > 0``). ``order`` lists active users by
    ``eff`` descending, ties by ascending user index (002 §III-A reindexing).
    """

    counts: np.ndarray
    eff: np.ndarray
    n: int
    n_eff: int
    active: np.ndarray
    order: np.ndarray
    sorted_eff: np.ndarray
    ascending: np.ndarray
    asc_cumsum: np.ndarray
    capped: bool
    cache: dict[object, object] = field(default_factory=dict, repr=False)

    @property
    def n_active(self) -> int:
        """``L``: active users (``eff > 0``)."""
        return int(self.active.size)

    @property
    def m_max(self) -> int:
        """``m*`` of the active users."""
        return int(self.sorted_eff[0])

    @property
    def m_min(self) -> int:
        """``m_*`` of the active users."""
        return int(self.sorted_eff[-1])

    @property
    def dropped(self) -> int:
        """Records of the grid that caps leave out."""
        return self.n - self.n_eff

    def clipped_total(self, m: npt.ArrayLike) -> np.ndarray:
        """``Σ_l min(eff_l, m)`` for every ``m`` given (vectorised with prefix sums)."""
        ms = np.asarray(m, dtype=np.int64)
        below = np.searchsorted(self.ascending, ms, side="right")
        out: np.ndarray = self.asc_cumsum[below] + ms * (self.n_active - below)
        return out

    def median(self) -> int:
        """``med(m_l)``: the ``ceil(L/2)``-th largest count (002 §II-A definition)."""
        return int(self.sorted_eff[(self.n_active + 1) // 2 - 1])


def _build(counts: np.ndarray, caps: np.ndarray | None) -> CountsInfo:
    eff = counts if caps is None else np.minimum(counts, caps)
    n = int(counts.sum())
    n_eff = int(eff.sum())
    if n == 0:
        raise ValueError("a grid needs at least one record")
    if n_eff == 0:
        raise ValueError("no record remains after the caps")
    active = np.flatnonzero(eff > 0)
    order = active[np.argsort(-eff[active], kind="stable")]
    sorted_eff = eff[order]
    ascending = sorted_eff[::-1].copy()
    asc_cumsum = np.zeros(ascending.size + 1, dtype=np.int64)
    np.cumsum(ascending, out=asc_cumsum[1:])
    for a in (eff, active, order, sorted_eff, ascending, asc_cumsum):
        a.flags.writeable = False
    return CountsInfo(
        counts=counts,
        eff=eff,
        n=n,
        n_eff=n_eff,
        active=active,
        order=order,
        sorted_eff=sorted_eff,
        ascending=ascending,
        asc_cumsum=asc_cumsum,
        capped=caps is not None and bool(np.any(eff != counts)),
    )


_CACHE: OrderedDict[tuple[bytes, bytes | None], CountsInfo] = OrderedDict()
_LOCK = threading.Lock()
_MAXSIZE = 64


def prepare_counts(counts: npt.ArrayLike, caps: npt.ArrayLike | None = None) -> CountsInfo:
    """Validate ``counts`` (and optional per-user ``caps``) and return the prepared occupancy."""
    c = int_array(counts, "counts")
    cp = None
    if caps is not None:
        cp = int_array(caps, "caps")
        if cp.shape != c.shape:
            raise ValueError("caps must have one entry per user")
    c.flags.writeable = False
    key = (c.tobytes(), None if cp is None else cp.tobytes())
    with _LOCK:
        info = _CACHE.get(key)
        if info is not None:
            _CACHE.move_to_end(key)
            return info
    info = _build(c, cp)
    with _LOCK:
        _CACHE[key] = info
        if len(_CACHE) > _MAXSIZE:
            _CACHE.popitem(last=False)
    return info
