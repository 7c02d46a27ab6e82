"""``user_window``: weighted user means clipped to a privately chosen window ``[0, b]``.

Pure ``ε``-DP at the user level (proofs: docs/math.md §11.1–§11.2). Public: the median
count ``k``, weights ``w_l = min(m_l, k)/Σ min(m_l, k)`` (Cummings, Feldman, McMillan and
Talwar, NeurIPS 2022), windows ``b_j = U·{1/6, 1/3, 1/2, 2/3, 1}``, ``ε_w = window_share·ε``
and ``ε_n`` the rest. With the values: user means ``v_l`` clamped to ``[0, U]``; the
window by monotone noisy max on ``-#{v_l > b_j} - round(b_j w* L/(ε_n δ))``; then
``Σ w_l min(v_l, b) + Lap(b w*/ε_n)``. The choice bounds how many users are clipped, hence
an honest ci95 (docs/math.md §11.6).

Every rule is written once, over many grids in arrays (:class:`WindowGrids`); one grid's
release is a batch of one, a day's slot release runs many (docs/math.md §9.4.9).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.data.results import BiasSpread
from app.core.data.window_grids import (
    WindowGrids,
    row_sums,
    top_sums,
)
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import float_sum_sensitivities, grid_fsums, split_shares
from app.core.noise.laplace import NoiseSource, calibrate_choice_scale
from app.core.noise.many import calibrate_scales

__all__ = [
    "WINDOW_FRACTIONS",
    "WindowRows",
    "clipped_bound",
    "monotone_noisy_max",
    "plan_user_window",
    "split_share",
    "user_window_grid_widths",
    "user_window_rows",
    "user_window_widths",
    "window_counts",
    "window_draft",
    "window_penalties",
    "window_spread",
    "window_spreads",
    "window_weights",
]

NAME = "user_window"
WINDOW_FRACTIONS = (1.0 / 6.0, 1.0 / 3.0, 0.5, 2.0 / 3.0, 1.0)
STEP_FRACTION = 1.0 / 16.0  # δ = U/16: the unit of clipping in the window score
SPREAD_BETA = 0.01  # ci95: 0.01 for the clipped-user bound, 0.04 for the Laplace noise
LOG_SPREAD = math.log(1.0 / (0.05 - SPREAD_BETA))  # the Laplace part's quantile / scale


def split_share(eps: float, share: float) -> tuple[float, float]:
    """``(ε_w, ε_n)``: ``ε_w = share·ε`` and ``ε_w + ε_n <= ε`` exactly (:func:`split_shares`)."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"window_share must lie in (0, 1), got {share}")
    e_w, e_n = split_shares(eps, (share,))
    return e_w, e_n


def window_weights(info: CountsInfo) -> np.ndarray:
    """``w_l = min(m_l, k)/Σ min(m_l, k)`` over active users, ``k`` the median count."""
    k = info.median()
    gam = np.minimum(info.eff[info.active], k).astype(np.float64)
    out: np.ndarray = gam / gam.sum()
    return out


def window_penalties(
    U: float, bounds: np.ndarray, w_max: np.ndarray | float, L: np.ndarray | int, eps_n: float
) -> np.ndarray:
    """``round(b_j w* L/(ε_n δ))``: the noise at ``b_j`` in users clipped by ``δ`` (public);
    one row per grid when ``w_max`` and ``L`` are columns."""
    return np.round(bounds * w_max * L / (eps_n * (STEP_FRACTION * U))).astype(np.int64)


def window_counts(x: np.ndarray, bounds: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per grid (users ``start[g]:start[g+1]``) and window, ``#{l: x_l > b_j}``: monotone
    counts, one user moves each by at most 1 and all in one direction."""
    above = (x[:, None] > bounds[None, :]).astype(np.int64)
    out: np.ndarray = np.add.reduceat(above, start[:-1], axis=0)
    return out


def monotone_noisy_max(noise: NoiseSource, scores: np.ndarray, eps: float) -> int:
    """An ``eps``-DP choice among integer scores that are monotone with sensitivity 1:
    report-noisy-max at ``2·eps`` (docs/math.md §11.1; Dwork and Roth, Claim 3.9; OpenDP's
    ``make_noisy_max`` with ``monotonic=True``)."""
    return noise.noisy_max(scores, 2.0 * eps, sensitivity=1)


def clipped_bound(pen: np.ndarray, j: np.ndarray | int, eps_w: float) -> np.ndarray:
    """At most this many users lie beyond window ``j`` (per row of ``pen``), with
    probability ``1 - β``: ``pen_top - pen_j + s ln((C - 1)/(2β))``, the top window clipping
    nobody (docs/math.md §11.6). A 1-d ``pen`` and an int ``j`` give a 0-d array."""
    s = calibrate_choice_scale(1, 2.0 * eps_w)
    slack = s * math.log((np.shape(pen)[-1] - 1) / (2.0 * SPREAD_BETA))
    p = np.atleast_2d(pen)
    jj = np.atleast_1d(j)
    gap = (p[:, -1] - p[np.arange(jj.size), jj]).astype(np.float64)
    out: np.ndarray = np.maximum(0, np.floor(gap + slack)).astype(np.int64)
    return out.reshape(np.shape(j))


def window_spreads(
    wg: WindowGrids, U: float, b: np.ndarray, a: np.ndarray, groups: dict[int, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Per grid, bounds ``(below, above)`` on ``μ - Σ w_l min(v_l, b)`` when at most ``a``
    users have ``v_l > b`` (docs/math.md §11.6): with ``p_l = eff_l/n``, user ``l`` adds at
    least ``min(0, (p_l - w_l) b)``, at most ``g_l = max(0, (p_l - w_l) b)`` unclipped or
    ``p_l U - w_l b`` clipped; the capped records add ``[0, U d/n]``."""
    nf = wg.n.astype(np.float64)
    p = wg.m / nf[wg.grid]
    bu = b[wg.grid]
    g = np.maximum(0.0, (p - wg.w) * bu)
    extra = np.maximum(0.0, p * U - wg.w * bu - g)
    below = row_sums(wg, np.maximum(0.0, (wg.w - p) * bu), groups)
    above = U * wg.dropped.astype(np.float64) / nf + row_sums(wg, g, groups)
    return below, above + top_sums(wg, extra, np.minimum(wg.L, a), groups)


def window_spread(info: CountsInfo, U: float, b: float, clipped_at_most: int) -> BiasSpread:
    """:func:`window_spreads` of one grid (public counts)."""
    wg = WindowGrids.one(info)
    below, above = window_spreads(wg, U, np.array([b]), np.array([clipped_at_most]), wg.by_size())
    return BiasSpread(float(below[0]), float(above[0]), SPREAD_BETA)


@dataclass(frozen=True)
class WindowRows:
    """One window statistic of many grids up to its private choice: integer scores (one row
    per grid), the level the monotone noisy max runs at, and the rest once ``j`` is drawn."""

    scores: np.ndarray
    eps_choice: float
    eps_window: float
    eps_noise: float
    finish: Callable[[np.ndarray], WindowDone]


#: a window mechanism's rows of some grids (their kept values ``x`` and where each
#: unit starts; units grouped by size): its scores and finishing step (:class:`WindowRows`)
Rows = Callable[[WindowGrids, np.ndarray, np.ndarray, dict[int, np.ndarray]], WindowRows]


@dataclass(frozen=True)
class WindowDone:
    """Per grid: the window, the noiseless estimate, its sensitivity and its spread."""

    b: np.ndarray
    value: np.ndarray
    sensitivity: np.ndarray
    below: np.ndarray
    above: np.ndarray


def user_window_rows(
    wg: WindowGrids,
    v: np.ndarray,
    U: float,
    eps: float,
    share: float,
    groups: dict[int, np.ndarray],
) -> WindowRows:
    """``user_window`` on every grid of ``wg``, ``v`` the clamped user means."""
    e_w, e_n = split_share(eps, share)
    bounds = U * np.asarray(WINDOW_FRACTIONS)
    pen = window_penalties(U, bounds[None, :], wg.w_max[:, None], wg.L[:, None], e_n)
    scores = -window_counts(v, bounds, wg.start) - pen

    def finish(j: np.ndarray) -> WindowDone:
        b = bounds[j]
        value = grid_fsums(wg.w * np.minimum(v, b[wg.grid]), wg.start)
        below, above = window_spreads(wg, U, b, clipped_bound(pen, j, e_w), groups)
        sens = float_sum_sensitivities(b * wg.w_max, b)
        return WindowDone(b, value, sens, below, above)

    return WindowRows(scores, 2.0 * e_w, e_w, e_n, finish)


def user_means(x: np.ndarray, first: np.ndarray, wg: WindowGrids, U: float) -> np.ndarray:
    """Each active user's mean over its kept records ``x[first[l]:]``, from its values only,
    in ``[0, U]``."""
    out: np.ndarray = np.clip(np.add.reduceat(x, first) / wg.m.astype(np.float64), 0.0, U)
    return out


def one_grid(grid: GridData, info: CountsInfo, noise: NoiseSource, rows: Rows) -> Estimate:
    """A window mechanism's estimate of one grid: its array rules on a batch of one."""
    wg = WindowGrids.one(info)
    x = grid.values[grid.record_rank < info.eff[grid.record_user]]  # kept, user after user
    first = np.zeros(wg.m.size, dtype=np.int64)
    np.cumsum(wg.m[:-1], out=first[1:])
    done_rows = rows(wg, x, first, wg.by_size())
    j = np.array([monotone_noisy_max(noise, done_rows.scores[0], done_rows.eps_window)])
    done = done_rows.finish(j)
    b = float(done.b[0])
    spread = BiasSpread(float(done.below[0]), float(done.above[0]), SPREAD_BETA)
    return Estimate(float(done.value[0]), float(done.sensitivity[0]), {"window_hi": b}, spread)


def window_draft(
    statistic: str, name: str, info: CountsInfo, eps: float, window_share: float, rows: Rows
) -> Draft:
    """A window mechanism's public plan (mean or variance): the window is drawn at release,
    by its array ``rows`` on a batch of one (:func:`one_grid`)."""
    e_w, e_n = split_share(eps, window_share)
    details: dict[str, object] = {"k": info.median(), "window_share": window_share}
    details.update(eps_window=e_w, eps_noise=e_n)

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        return one_grid(grid, info, noise, rows)

    return Draft(statistic, name, eps, e_n, None, None, info.eff.copy(), details, estimator)


def plan_user_window(info: CountsInfo, U: float, eps: float, window_share: float) -> Draft:
    """Public plan (module docstring); the window is drawn at release."""

    def rows(
        wg: WindowGrids, x: np.ndarray, first: np.ndarray, groups: dict[int, np.ndarray]
    ) -> WindowRows:
        return user_window_rows(wg, user_means(x, first, wg, U), U, eps, window_share, groups)

    return window_draft("mean", NAME, info, eps, window_share, rows)


def window_widths(
    done: Callable[[np.ndarray], WindowDone], G: int, C: int, eps_noise: float
) -> np.ndarray:
    """The ci95 width before projection, ``2q + below + above``, of each of ``G`` grids
    (rows) for each of the ``C`` windows the choice can make (public: docs/math.md §11.6)."""
    out = np.empty((G, C))
    for j in range(C):
        d = done(np.full(G, j, dtype=np.int64))
        q = calibrate_scales(d.sensitivity, eps_noise) * LOG_SPREAD
        out[:, j] = 2.0 * q + d.below + d.above
    return out


def user_window_widths(info: CountsInfo, U: float, eps: float, window_share: float) -> np.ndarray:
    """:func:`window_widths` of ``user_window`` on these counts."""
    wg = WindowGrids.one(info)
    out: np.ndarray = user_window_grid_widths(wg, U, eps, window_share)[0]
    return out


def user_window_grid_widths(wg: WindowGrids, U: float, eps: float, share: float) -> np.ndarray:
    """:func:`window_widths` of ``user_window`` on every grid of ``wg`` (public counts)."""
    rows = user_window_rows(wg, np.zeros(wg.m.size), U, eps, share, wg.by_size())
    return window_widths(rows.finish, wg.L.size, len(WINDOW_FRACTIONS), rows.eps_noise)
