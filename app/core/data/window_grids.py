"""The window path's grids as flat arrays (docs/math.md §9.4.9): every active user of many
grids, grid after grid, and the per-grid sums the window mechanisms need.

One grid is a batch of one: the per-grid release and a day's slot release run the same
array rules (:mod:`app.core.mechanisms.mean_window`, :mod:`app.core.mechanisms.variance_window`).
Sums are deterministic per grid: ``np.add.reduceat`` over each user's own records,
numpy's row sums over grids of equal size, exact sums (app/core/mechanisms/float_sums.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.joined import JoinedGrids, offsets

__all__ = [
    "WindowGrids",
    "fits",
    "kept_records",
    "row_sums",
    "top_sums",
]


@dataclass(frozen=True, eq=False)
class WindowGrids:
    """The active users (``eff > 0``) of many grids, grid after grid, users ascending."""

    eff: list[np.ndarray]  # per grid, eff over all its users (the drafts' ``kept``)
    grid: np.ndarray  # grid of each active user
    m: np.ndarray  # eff of each active user (int64)
    start: np.ndarray  # first active user of each grid (G + 1 entries)
    L: np.ndarray  # active users per grid
    n: np.ndarray  # records per grid (all, capped ones included)
    dropped: np.ndarray  # records the caps leave out, per grid
    median: np.ndarray  # k: the ceil(L/2)-th largest eff, per grid
    m_max: np.ndarray
    w: np.ndarray  # w_l = min(m_l, k)/Σ min(m_l, k)
    w_max: np.ndarray

    @classmethod
    def of(cls, joined: JoinedGrids) -> WindowGrids:
        all_eff = np.minimum(joined.counts, joined.caps)
        bounds = joined.pairs.tolist()
        eff = [all_eff[a:b] for a, b in itertools.pairwise(bounds)]  # views (np.split: slower)
        active = all_eff > 0
        grid, m = joined.user_grid()[active], all_eff[active]
        L = np.bincount(grid, minlength=joined.n_grids).astype(np.int64)
        if np.any(L == 0):
            raise ValueError("no record remains after the caps")
        start = np.zeros(L.size + 1, dtype=np.int64)
        np.cumsum(L, out=start[1:])
        n = np.diff(joined.records)
        # within each grid, eff descending: one sort of the packed key (grid, top - eff)
        top = np.int64(m.max()) + 1
        key = np.sort(grid * top + (top - 1 - m))
        at = start[:-1] + (L + 1) // 2 - 1
        median = top - 1 - (key[at] - np.arange(L.size, dtype=np.int64) * top)
        gam = np.minimum(m, median[grid]).astype(np.float64)
        total = np.bincount(grid, weights=gam, minlength=L.size)  # integers: exact
        w = gam / total[grid]
        return cls(
            eff=eff,
            grid=grid,
            m=m,
            start=start,
            L=L,
            n=n,
            dropped=n - np.bincount(grid, weights=m, minlength=L.size).astype(np.int64),
            median=median,
            m_max=np.maximum.reduceat(m, start[:-1]),
            w=w,
            w_max=np.maximum.reduceat(w, start[:-1]),
        )

    @classmethod
    def one(cls, info: CountsInfo) -> WindowGrids:
        """One grid from its checked counts: the fields :meth:`of` gives it (the same
        integers and the same float weights), without joining."""
        m = info.eff[info.active]
        gam = np.minimum(m, info.median()).astype(np.float64)
        w = gam / gam.sum()  # integers: exact
        return cls(
            eff=[info.eff],
            grid=np.zeros(m.size, dtype=np.int64),
            m=m,
            start=np.array([0, m.size], dtype=np.int64),
            L=np.array([m.size], dtype=np.int64),
            n=np.array([info.n], dtype=np.int64),
            dropped=np.array([info.dropped], dtype=np.int64),
            median=np.array([info.median()], dtype=np.int64),
            m_max=np.array([info.m_max], dtype=np.int64),
            w=w,
            w_max=np.array([w.max()]),
        )

    def by_size(self) -> dict[int, np.ndarray]:
        """The grids of each number of active users (rows of equal length)."""
        if self.L.size == 1:
            return {int(self.L[0]): np.zeros(1, dtype=np.int64)}
        order = np.argsort(self.L, kind="stable")
        cuts = np.flatnonzero(np.diff(self.L[order])) + 1
        return {int(self.L[idx[0]]): idx for idx in np.split(order, cuts)}

    def rows(self, x: np.ndarray, idx: np.ndarray, size: int) -> np.ndarray:
        """``x`` (one entry per active user) of grids ``idx``, all with ``size`` users, as rows."""
        if idx.size == self.L.size:  # every grid has ``size`` users: ``idx`` is 0..G-1 (by_size)
            return x.reshape(idx.size, size)
        pos = self.start[idx][:, None] + np.arange(size)[None, :]
        out: np.ndarray = x[pos]
        return out


def row_sums(wg: WindowGrids, x: np.ndarray, groups: dict[int, np.ndarray]) -> np.ndarray:
    """Per grid, ``np.sum`` of its users' ``x`` (numpy's row sum is each row's pairwise sum)."""
    out = np.empty(wg.L.size)
    for size, idx in groups.items():
        out[idx] = wg.rows(x, idx, size).sum(axis=1)
    return out


def top_sums(
    wg: WindowGrids, x: np.ndarray, a: np.ndarray, groups: dict[int, np.ndarray]
) -> np.ndarray:
    """Per grid, ``np.sort(x)[::-1][:a].sum()`` over its users (``a`` per grid)."""
    out = np.zeros(wg.L.size)
    for size, idx in groups.items():
        desc = np.sort(wg.rows(x, idx, size), axis=1)[:, ::-1]
        top = a[idx]
        for t in np.unique(top).tolist():
            if t > 0:
                sel = np.flatnonzero(top == t)
                out[idx[sel]] = np.ascontiguousarray(desc[sel, :t]).sum(axis=1)
    return out


def kept_records(
    joined: JoinedGrids, wg: WindowGrids, users: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Every active user's earliest ``eff`` records (users in order) and where each starts
    (the grids' records lie user after user, grid after grid: :func:`fits`). ``users``:
    when ``wg`` holds some of ``joined``'s grids (:meth:`JoinedGrids.take_counts`), their
    users' positions in ``joined``."""
    ends = offsets(joined.counts)
    start = ends[:-1]
    eff = np.minimum(joined.counts, joined.caps)
    first = np.zeros(wg.m.size, dtype=np.int64)
    np.cumsum(wg.m[:-1], out=first[1:])
    if users is None:  # every user: all records but each one's dropped tail, in order
        return _without_tails(joined.values[: ends[-1]], start, eff, joined.counts), first
    start, eff = start[users], eff[users]
    user_start = start[eff > 0]
    idx = np.repeat(user_start - first, wg.m) + np.arange(int(wg.m.sum()))
    return joined.values[idx], first


def _without_tails(
    values: np.ndarray, start: np.ndarray, eff: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """``values`` (user ``l``'s ``counts[l]`` records from ``start[l]``, user after user)
    without each user's records after its first ``eff[l]``: the same records as a gather
    of the kept ones, by a mask over the few dropped runs (no index per record)."""
    short = np.flatnonzero(eff < counts)
    if not short.size:
        return values
    marks = np.zeros(values.size + 1, dtype=np.int8)  # +1 where a dropped run starts
    marks[start[short] + np.maximum(eff[short], 0)] = 1  # disjoint runs: distinct starts
    marks[start[short] + counts[short]] -= 1
    kept: np.ndarray = values[np.cumsum(marks[:-1], dtype=np.int8) == 0]
    return kept


def fits(joined: JoinedGrids, U: float) -> bool:
    """Whether every grid has records, as many as its counts say, all finite in
    ``[0, U]`` (what ``GridData.validate`` asks of each)."""
    n = np.diff(joined.records)
    if n.size == 0 or n.min() == 0:
        return False
    per_grid = np.bincount(joined.user_grid(), weights=joined.counts, minlength=n.size)
    if not np.array_equal(per_grid, n):  # float sums of integers below 2^53: exact
        return False
    values = joined.values
    return bool(np.all(np.isfinite(values)) and values.min() >= 0.0 and values.max() <= U)
