"""Many grids' arrays one after another, as a slot release's window path reads them
(docs/math.md §9.4.9): grid ``i``'s users are ``pairs[i]:pairs[i + 1]`` of ``counts`` and
``caps``, its values ``records[i]:records[i + 1]`` of ``values``, user after user."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["GridInput", "JoinedGrids"]


class GridInput(Protocol):
    """A grid's records: per-user counts (users in order) and the values, user after
    user, earliest first (``GridData`` is one)."""

    @property
    def counts(self) -> np.ndarray: ...

    @property
    def values(self) -> np.ndarray: ...


def offsets(sizes: np.ndarray) -> np.ndarray:
    """``[0, s0, s0 + s1, ...]`` (int64)."""
    out = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _segments(bounds: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions of segments ``idx`` of ``bounds``, one after another, and their offsets."""
    sizes = (bounds[1:] - bounds[:-1])[idx]
    new = offsets(sizes)
    at = np.repeat(bounds[:-1][idx] - new[:-1], sizes) + np.arange(int(new[-1]))
    return at, new


@dataclass(frozen=True, eq=False)
class JoinedGrids:
    """Grids and their caps joined (see the module docstring). A grid whose caps cannot be
    read as its users' (another shape, not integers, no user) has caps ``-1``: no window
    path for it, the per-grid path says what is wrong."""

    counts: np.ndarray  # int64, per user
    caps: np.ndarray  # int64, per user
    values: np.ndarray  # float64, per record
    pairs: np.ndarray  # int64, one more than the grids
    records: np.ndarray  # int64, one more than the grids

    @classmethod
    def of(cls, grids: Sequence[GridInput], caps: Sequence[np.ndarray]) -> JoinedGrids:
        counts = [np.asarray(g.counts, dtype=np.int64) for g in grids]
        read = []
        for c, k in zip(counts, caps, strict=True):
            k = np.asarray(k)
            ok = k.shape == c.shape and k.dtype.kind in "iu" and k.size > 0
            read.append(k.astype(np.int64, copy=False) if ok else np.full(c.size, -1))
        ints, floats = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return cls(
            counts=np.concatenate([ints, *counts]),
            caps=np.concatenate([ints, *read]),
            values=np.concatenate([floats, *(np.asarray(g.values) for g in grids)]),
            pairs=offsets(np.array([c.size for c in counts], dtype=np.int64)),
            records=offsets(np.array([np.size(g.values) for g in grids], dtype=np.int64)),
        )

    @property
    def n_grids(self) -> int:
        return int(self.pairs.size - 1)

    def user_grid(self) -> np.ndarray:
        """The grid of each user."""
        return np.repeat(np.arange(self.n_grids, dtype=np.int64), np.diff(self.pairs))

    def take(self, idx: Sequence[int]) -> JoinedGrids:
        """Grids ``idx``, in that order."""
        which = np.asarray(idx, dtype=np.int64)
        users, pairs = _segments(self.pairs, which)
        recs, records = _segments(self.records, which)
        return JoinedGrids(self.counts[users], self.caps[users], self.values[recs], pairs, records)

    def take_counts(self, idx: Sequence[int]) -> tuple[JoinedGrids, np.ndarray]:
        """Grids ``idx`` without their values (``values`` empty: counts, caps and
        bounds only, no copy of the records), and their users' positions in these."""
        which = np.asarray(idx, dtype=np.int64)
        users, pairs = _segments(self.pairs, which)
        records = offsets(np.diff(self.records)[which])
        empty = self.values[:0]
        return JoinedGrids(self.counts[users], self.caps[users], empty, pairs, records), users
