"""Per-grid record storage: flat value arrays with per-user offsets and prefix sums.

Records sorted by user, then time (docs/math.md §1.1: clipped estimators keep each user's
earliest records); users are positions ``0..L-1``. Cached centred prefix sums of values and
squares make a clipped mean or variance O(users).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from app.core.data.checks import check_bound
from app.core.data.counts import int_array

__all__ = ["GridData"]


def _segment_sums(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of each segment ``x[offsets[l]:offsets[l+1]]`` (0 for an empty one), read-only."""
    out = np.zeros(offsets.size - 1)
    filled = np.flatnonzero(np.diff(offsets) > 0)
    if filled.size:
        out[filled] = np.add.reduceat(x, offsets[:-1][filled])
    return _readonly(out)


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class GridData:
    """The records of one grid: ``values`` sorted by user then time, ``offsets`` (L+1).

    User ``l`` owns ``values[offsets[l]:offsets[l+1]]`` in time order. A user may
    have no record (equal offsets). Arrays are made read-only so that the cached
    prepared structures (prefix sums, counts) stay valid.
    """

    values: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        values = np.array(self.values, dtype=np.float64, copy=True).reshape(-1)
        offsets = np.array(self.offsets, dtype=np.int64, copy=True).reshape(-1)
        if offsets.size < 2:
            raise ValueError("a grid needs at least one user (offsets of length L+1 >= 2)")
        if offsets[0] != 0 or offsets[-1] != values.size:
            raise ValueError("offsets must start at 0 and end at the number of values")
        if np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must be non-decreasing")
        object.__setattr__(self, "values", _readonly(values))
        object.__setattr__(self, "offsets", _readonly(offsets))

    # ----------------------------------------------------------------- builders
    @classmethod
    def from_user_values(cls, users: Sequence[Sequence[float] | npt.ArrayLike]) -> GridData:
        """Build from one sequence of values per user, each in time order."""
        parts = [np.asarray(u, dtype=np.float64).reshape(-1) for u in users]
        counts = np.array([p.size for p in parts], dtype=np.int64)
        values = np.concatenate(parts) if parts else np.empty(0)
        return cls.from_counts_and_values(counts, values)

    @classmethod
    def from_counts_and_values(cls, counts: npt.ArrayLike, values: npt.ArrayLike) -> GridData:
        """Build from per-user counts and the flat values (sorted by user then time)."""
        c = int_array(counts, "counts")
        offsets = np.zeros(c.size + 1, dtype=np.int64)
        np.cumsum(c, out=offsets[1:])
        return cls(values=np.asarray(values, dtype=np.float64), offsets=offsets)

    # --------------------------------------------------------------- properties
    @cached_property
    def counts(self) -> np.ndarray:
        """``m_l``: records per user (int64, read-only)."""
        return _readonly(np.diff(self.offsets))

    @property
    def n_users(self) -> int:
        """``L``: users of the grid (including users with no record)."""
        return int(self.offsets.size - 1)

    @property
    def n_records(self) -> int:
        """``n``: records of the grid."""
        return int(self.values.size)

    @cached_property
    def _range(self) -> tuple[float, float, bool]:
        v = self.values
        if v.size == 0:
            return (math.inf, -math.inf, True)
        return (float(v.min()), float(v.max()), bool(np.all(np.isfinite(v))))

    def validate(self, U: float) -> None:
        """Raise ``ValueError`` unless there is a record and every value is finite in ``[0, U]``."""
        U = check_bound(U)
        lo, hi, finite = self._range
        if self.values.size == 0:
            raise ValueError("the grid has no record")
        if not finite:
            raise ValueError("values must be finite")
        if lo < 0.0 or hi > U:
            raise ValueError(f"values must lie in [0, U] = [0, {U}]; found [{lo}, {hi}]")

    # ------------------------------------------------ per-user sums (isolated)
    def user_moments(self, centre: float) -> tuple[np.ndarray, np.ndarray]:
        """Per user, ``Σ (x - c)`` and ``Σ (x - c)²`` over all its records, each from that
        user's values only (``np.add.reduceat`` over its own segment; 0 for no record).
        Cached per centre: a slot release asks for the same ones again."""
        cache = self._moment_cache
        hit = cache.get(centre)
        if hit is None:
            d = self.values - centre
            hit = (_segment_sums(d, self.offsets), _segment_sums(d * d, self.offsets))
            if len(cache) >= 4:
                cache.clear()
            cache[centre] = hit
        return hit

    @cached_property
    def _moment_cache(self) -> dict[float, tuple[np.ndarray, np.ndarray]]:
        return {}

    # ------------------------------------------------------------ prefix sums
    @cached_property
    def _center(self) -> float:
        return float(np.mean(self.values)) if self.values.size else 0.0

    @cached_property
    def _prefix(self) -> tuple[np.ndarray, np.ndarray]:
        c = self.values - self._center
        p1 = np.zeros(c.size + 1)
        p2 = np.zeros(c.size + 1)
        np.add.accumulate(c, out=p1[1:])
        np.add.accumulate(c * c, out=p2[1:])
        return _readonly(p1), _readonly(p2)

    def _heads(self, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = np.asarray(kept, dtype=np.int64)
        if k.shape != self.counts.shape:
            raise ValueError("kept must have one entry per user")
        if np.any(k < 0) or np.any(k > self.counts):
            raise ValueError("kept counts must satisfy 0 <= kept <= counts")
        start = self.offsets[:-1]
        return start, start + k

    def head_sums(self, kept: npt.ArrayLike) -> np.ndarray:
        """Per user, the sum of its earliest ``kept[l]`` values (0 where kept is 0)."""
        p1, _ = self._prefix
        start, stop = self._heads(np.asarray(kept))
        out: np.ndarray = p1[stop] - p1[start] + np.asarray(kept, dtype=np.float64) * self._center
        return out

    @cached_property
    def record_user(self) -> np.ndarray:
        """The user index of every record (int64, read-only)."""
        return _readonly(np.repeat(np.arange(self.n_users, dtype=np.int64), self.counts))

    @cached_property
    def record_rank(self) -> np.ndarray:
        """Position of every record within its user's time order (0 = earliest)."""
        ranks = np.arange(self.n_records, dtype=np.int64) - self.offsets[:-1][self.record_user]
        return _readonly(ranks)
