"""``user_window`` (mean) and the ``window`` variance of many grids at once (docs/math.md §9.4.9).

A slot release runs ``auto`` on every grid, and on most grids of a city ``auto`` takes
the window path (:mod:`app.core.mechanisms.mean_window`,
:mod:`app.core.mechanisms.variance_window`). Run grid by grid, the Python around each
grid's few array operations cost more than the arithmetic
(~0.4 ms a grid, 10⁵ grids a day). Here every public quantity of every grid (median
count, weights, penalties, spreads) and every value-dependent one (user means, scores,
clipped sums) is computed in flat arrays over all the grids' users, with **the same
floating-point operations on the same operands** as the per-grid code: elementwise
operations, ``np.add.reduceat`` over each user's own records (whose result depends on
that user's values alone), numpy's row sums over grids of equal size (the pairwise sum
of each row, as ``np.sum`` of that grid's array) and ``math.fsum`` per grid. So given
the same private choices and noise every grid's release is bit for bit the per-grid one
(``tests/unit/core/test_window_batch.py``). The private choices are one OpenDP
noisy-max invocation per grid and statistic, as before (:func:`app.core.noise.many.noisy_max_rows`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.core.data.joined import JoinedGrids, offsets
from app.core.engine.batch import PendingBatch
from app.core.mechanisms.float_sums import (
    float_sum_sensitivities,
    float_variance_sensitivities,
    grid_fsums,
)
from app.core.mechanisms.mean_window import (
    SPREAD_BETA,
    STEP_FRACTION,
    WINDOW_FRACTIONS,
    split_share,
)
from app.core.mechanisms.variance_window import VARIANCE_STEP_FRACTION, VARIANCE_WINDOW_FRACTIONS
from app.core.noise.laplace import NoiseSource, calibrate_choice_scale
from app.core.noise.many import calibrate_scales, noisy_max_rows

__all__ = ["WindowGrids", "fits", "start_window_releases"]

WINDOW_SHARE = 0.2  # the default of both mechanisms (app/core/options.py)


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
        desc = np.lexsort((-m, grid))  # within each grid, eff descending
        median = m[desc[start[:-1] + (L + 1) // 2 - 1]]
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

    def by_size(self) -> dict[int, np.ndarray]:
        """The grids of each number of active users (rows of equal length)."""
        order = np.argsort(self.L, kind="stable")
        cuts = np.flatnonzero(np.diff(self.L[order])) + 1
        return {int(self.L[idx[0]]): idx for idx in np.split(order, cuts)}

    def rows(self, x: np.ndarray, idx: np.ndarray, size: int) -> np.ndarray:
        """``x`` (one entry per active user) of grids ``idx``, all with ``size`` users, as rows."""
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


def kept_records(joined: JoinedGrids, wg: WindowGrids) -> tuple[np.ndarray, np.ndarray]:
    """Every active user's earliest ``eff`` records (users in order) and where each starts
    (the grids' records lie user after user, grid after grid: :func:`fits`)."""
    user_start = offsets(joined.counts)[:-1][np.minimum(joined.counts, joined.caps) > 0]
    first = np.zeros(wg.m.size, dtype=np.int64)
    np.cumsum(wg.m[:-1], out=first[1:])
    idx = np.repeat(user_start - first, wg.m) + np.arange(int(wg.m.sum()))
    return joined.values[idx], first


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


def _clipped_bounds(pen: np.ndarray, j: np.ndarray, eps_w: float, L: np.ndarray) -> np.ndarray:
    """:func:`app.core.mechanisms.mean_window.clipped_bound` per grid, capped at ``L``."""
    s = calibrate_choice_scale(1, 2.0 * eps_w)
    slack = s * math.log((pen.shape[1] - 1) / (2.0 * SPREAD_BETA))
    gap = (pen[:, -1] - pen[np.arange(j.size), j]).astype(np.float64)
    out: np.ndarray = np.minimum(L, np.maximum(0, np.floor(gap + slack)).astype(np.int64))
    return out


def _window_counts(x: np.ndarray, bounds: np.ndarray, wg: WindowGrids) -> np.ndarray:
    """Per grid and candidate, ``#{l: x_l > b_j}`` (integers)."""
    above = (x[:, None] > bounds[None, :]).astype(np.int64)
    out: np.ndarray = np.add.reduceat(above, wg.start[:-1], axis=0)
    return out


@dataclass(frozen=True)
class _Pending:
    """One statistic of every grid up to its private choice: scores and how to finish."""

    scores: np.ndarray  # (G, C) integer scores
    eps_choice: float  # the level noisy max runs at (2 ε_w, monotone scores)
    finish: Callable[[np.ndarray], PendingBatch]


def _mean(
    wg: WindowGrids, v: np.ndarray, U: float, eps: float, groups: dict[int, np.ndarray]
) -> _Pending:
    e_w, e_n = split_share(eps, WINDOW_SHARE)
    bounds = U * np.asarray(WINDOW_FRACTIONS)
    delta = STEP_FRACTION * U
    pen = np.round(
        bounds[None, :] * wg.w_max[:, None] * wg.L[:, None].astype(np.float64) / (e_n * delta)
    ).astype(np.int64)
    scores = -_window_counts(v, bounds, wg) - pen

    def finish(j: np.ndarray) -> PendingBatch:
        b = bounds[j]
        value = grid_fsums(wg.w * np.minimum(v, b[wg.grid]), wg.start)
        a = _clipped_bounds(pen, j, e_w, wg.L)
        nf = wg.n.astype(np.float64)
        p = wg.m / nf[wg.grid]
        bu = b[wg.grid]
        g = np.maximum(0.0, (p - wg.w) * bu)
        extra = np.maximum(0.0, p * U - wg.w * bu - g)
        below = row_sums(wg, np.maximum(0.0, (wg.w - p) * bu), groups)
        above = U * wg.dropped.astype(np.float64) / nf + row_sums(wg, g, groups)
        above = above + top_sums(wg, extra, a, groups)
        sens = float_sum_sensitivities(b * wg.w_max, b)
        return _pending(wg, "mean", "user_window", eps, e_w, e_n, value, sens, b, below, above, U)

    return _Pending(scores, 2.0 * e_w, finish)


def _variance(
    wg: WindowGrids,
    x: np.ndarray,
    first: np.ndarray,
    U: float,
    eps: float,
    groups: dict[int, np.ndarray],
) -> _Pending:
    e_w, e_n = split_share(eps, WINDOW_SHARE)
    bounds = U * np.asarray(VARIANCE_WINDOW_FRACTIONS)
    wm = wg.w_max[:, None]
    bb = (bounds * bounds)[None, :]
    sens = np.where(wm <= 0.5, bb * wm * (1.0 - wm), bb / 4.0)
    delta = VARIANCE_STEP_FRACTION * U
    pen = np.round(sens * wg.L[:, None].astype(np.float64) / (e_n * U * delta)).astype(np.int64)
    top = np.maximum.reduceat(x, first)
    scores = -_window_counts(top, bounds, wg) - pen

    def finish(j: np.ndarray) -> PendingBatch:
        b = bounds[j]
        xc = np.minimum(x, np.repeat(b[wg.grid], wg.m))
        mf = wg.m.astype(np.float64)
        means = np.add.reduceat(xc, first) / mf
        squares = np.add.reduceat(xc * xc, first) / mf
        mu = grid_fsums(wg.w * means, wg.start)
        value = np.maximum(grid_fsums(wg.w * squares, wg.start) - mu * mu, 0.0)
        a = _clipped_bounds(pen, j, e_w, wg.L)
        nf = wg.n.astype(np.float64)
        p = wg.m / nf[wg.grid]
        common = np.minimum(p, wg.w)
        t_U = np.minimum(1.0, wg.dropped.astype(np.float64) / nf + top_sums(wg, p, a, groups))
        rest = 1.0 - row_sums(wg, common, groups) + top_sums(wg, common, a, groups)
        t_b = np.minimum(1.0, np.maximum(0.0, rest))
        spread = _mixture_sens(U, t_U) + _mixture_sens(b, t_b)
        float_sens = float_variance_sensitivities(sens[np.arange(j.size), j], b, wg.m_max)
        return _pending(
            wg, "variance", "window", eps, e_w, e_n, value, float_sens, b, spread, spread, U
        )

    return _Pending(scores, 2.0 * e_w, finish)


def _mixture_sens(b: float | np.ndarray, t: np.ndarray) -> np.ndarray:
    """:func:`app.core.mechanisms.variance_window.mixture_variance_sensitivity` elementwise."""
    bb = np.asarray(b) * np.asarray(b)
    out: np.ndarray = np.where(t <= 0.5, bb * t * (1.0 - t), bb / 4.0)
    return out


def _pending(
    wg: WindowGrids,
    statistic: str,
    mechanism: str,
    eps: float,
    e_w: float,
    e_n: float,
    value: np.ndarray,
    sens: np.ndarray,
    b: np.ndarray,
    below: np.ndarray,
    above: np.ndarray,
    U: float,
) -> PendingBatch:
    """One statistic of every grid as rows: what ``start_releases`` gives grid by grid
    (the same estimate, sensitivity, scale, spread and details)."""
    if not (np.all(below >= 0) and np.all(above >= 0)):  # BiasSpread's own check
        raise ValueError("invalid bias spread")
    n = sens.size
    scales = calibrate_scales(sens, e_n).tolist()
    details: list[dict[str, object]] = [
        {
            "k": k,
            "window_share": WINDOW_SHARE,
            "eps_window": e_w,
            "eps_noise": e_n,
            "selected_by": "auto",
            "window_hi": bi,
        }
        for k, bi in zip(wg.median.tolist(), b.tolist(), strict=True)
    ]
    return PendingBatch(
        statistic=[statistic] * n,
        mechanism=[mechanism] * n,
        epsilon=[eps] * n,
        value=value.tolist(),
        sensitivity=sens.tolist(),
        scale=scales,
        bias=[None] * n,
        spread=[
            (lo, hi, SPREAD_BETA) for lo, hi in zip(below.tolist(), above.tolist(), strict=True)
        ],
        kept=list(wg.eff),
        details=details,
        U=U,
    )


def start_window_releases(
    statistics: Sequence[str],
    joined: JoinedGrids,
    U: float,
    eps: float,
    noise: NoiseSource,
    known: WindowGrids | None = None,
) -> PendingBatch:
    """The rows of ``start_releases(statistics, grid, U, eps, "auto", caps=...)`` for each
    grid of ``joined``, all on ``auto``'s window path (the caller checks), grid after grid:
    the same estimates, scales and details. ``known``: their :class:`WindowGrids`, if made."""
    wg = WindowGrids.of(joined) if known is None else known
    groups = wg.by_size()
    x, first = kept_records(joined, wg)
    parts: list[_Pending] = []
    for statistic in statistics:
        if statistic == "mean":
            sums = np.add.reduceat(x, first)
            v = np.clip(sums / wg.m.astype(np.float64), 0.0, U)
            parts.append(_mean(wg, v, U, eps, groups))
        else:
            parts.append(_variance(wg, x, first, U, eps, groups))
    chosen = noisy_max_rows(noise, [(p.scores, p.eps_choice) for p in parts])
    done = [p.finish(j) for p, j in zip(parts, chosen, strict=True)]
    G, S = wg.L.size, len(done)
    return PendingBatch.concat(done, [s * G + g for g in range(G) for s in range(S)])
