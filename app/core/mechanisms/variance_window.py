"""``window`` variance: a weighted mixture variance of records clipped to a private ``[0, b]``.

Pure ``ε``-DP at the user level (proofs: docs/math.md §11.3). Public: the capped weights
``w_l`` of :mod:`app.core.mechanisms.mean_window`, windows ``b_j = U·{1/4, 1/3, 1/2, 2/3, 1}``,
``ε_w = window_share·ε``, ``ε_n`` the rest. The window by monotone noisy max on
``-#{l: max_l x > b_j} - round(Δ_j L/(ε_n U δ))`` (``δ = U/32``); then the mixture variance
``V = Σ w_l q_l - (Σ w_l v_l)²`` of the records clipped to ``[0, b]`` plus ``Lap(Δ/ε_n)``,
``Δ = b² w*(1 - w*)`` (``w* <= 1/2``) or ``b²/4``. Honest ci95: docs/math.md §11.6.
Every rule is written once, in arrays over many grids; one grid is a batch of one.
"""

from __future__ import annotations

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.results import BiasSpread
from app.core.data.window_grids import (
    WindowGrids,
    row_sums,
    top_sums,
)
from app.core.mechanisms.draft import Draft
from app.core.mechanisms.float_sums import float_variance_sensitivities, grid_fsums
from app.core.mechanisms.mean_window import (
    SPREAD_BETA,
    WindowDone,
    WindowRows,
    clipped_bound,
    split_share,
    window_counts,
    window_draft,
    window_widths,
)

__all__ = [
    "VARIANCE_WINDOW_FRACTIONS",
    "mixture_variance_sensitivity",
    "plan_variance_window",
    "variance_spread",
    "variance_spreads",
    "variance_window_rows",
    "window_variance_grid_widths",
    "window_variance_widths",
]

NAME = "window"
VARIANCE_WINDOW_FRACTIONS = (0.25, 1.0 / 3.0, 0.5, 2.0 / 3.0, 1.0)
VARIANCE_STEP_FRACTION = 1.0 / 32.0  # δ = U/32


def mixture_variance_sensitivity(b: float | np.ndarray, w: float | np.ndarray) -> np.ndarray:
    """``Δ_b(w) = b² w(1 - w)`` when ``w <= 1/2``, else ``b²/4``: how far replacing mass ``w``
    of a law on ``[0, b]`` moves its variance (004 Prop III.1's argument with weights;
    docs/math.md §11.3), elementwise."""
    bb = np.asarray(b) * np.asarray(b)
    out: np.ndarray = np.where(np.asarray(w) <= 0.5, bb * w * (1.0 - np.asarray(w)), bb / 4.0)
    return out


def variance_spreads(
    wg: WindowGrids, U: float, b: np.ndarray, a: np.ndarray, groups: dict[int, np.ndarray]
) -> np.ndarray:
    """Per grid, ``|σ² - V| <= Δ_U(t_U) + Δ_b(t_b)`` when at most ``a`` users have a record
    above ``b`` (docs/math.md §11.6): ``t_U`` the capped records' and the ``a`` largest
    ``p_l``'s mass, ``t_b = 1 - Σ min(p_l, w_l)`` plus the ``a`` largest ``min(p_l, w_l)``."""
    a = np.minimum(wg.L, a)
    nf = wg.n.astype(np.float64)
    p = wg.m / nf[wg.grid]
    common = np.minimum(p, wg.w)
    t_U = np.minimum(1.0, wg.dropped.astype(np.float64) / nf + top_sums(wg, p, a, groups))
    rest = 1.0 - row_sums(wg, common, groups) + top_sums(wg, common, a, groups)
    t_b = np.minimum(1.0, np.maximum(0.0, rest))
    out: np.ndarray = mixture_variance_sensitivity(U, t_U) + mixture_variance_sensitivity(b, t_b)
    return out


def variance_spread(info: CountsInfo, U: float, b: float, clipped_at_most: int) -> BiasSpread:
    """:func:`variance_spreads` of one grid (public counts)."""
    wg = WindowGrids.one(info)
    s = variance_spreads(wg, U, np.array([b]), np.array([clipped_at_most]), wg.by_size())
    return BiasSpread(float(s[0]), float(s[0]), SPREAD_BETA)


def variance_window_rows(
    wg: WindowGrids,
    x: np.ndarray,
    first: np.ndarray,
    U: float,
    eps: float,
    share: float,
    groups: dict[int, np.ndarray],
) -> WindowRows:
    """The ``window`` variance on every grid of ``wg``; ``x`` the active users' kept records,
    user ``l``'s from ``first[l]``."""
    e_w, e_n = split_share(eps, share)
    bounds = U * np.asarray(VARIANCE_WINDOW_FRACTIONS)
    sens = mixture_variance_sensitivity(bounds[None, :], wg.w_max[:, None])
    delta = VARIANCE_STEP_FRACTION * U
    pen = np.round(sens * wg.L[:, None].astype(np.float64) / (e_n * U * delta)).astype(np.int64)
    top = np.maximum.reduceat(x, first) if x.size else np.zeros(wg.m.size)
    scores = -window_counts(top, bounds, wg.start) - pen

    def finish(j: np.ndarray) -> WindowDone:
        b = bounds[j]
        xc = np.minimum(x, np.repeat(b[wg.grid], wg.m))
        mf = wg.m.astype(np.float64)
        means = np.add.reduceat(xc, first) / mf
        squares = np.add.reduceat(xc * xc, first) / mf
        mu = grid_fsums(wg.w * means, wg.start)
        value = np.maximum(grid_fsums(wg.w * squares, wg.start) - mu * mu, 0.0)
        spread = variance_spreads(wg, U, b, clipped_bound(pen, j, e_w), groups)
        float_sens = float_variance_sensitivities(sens[np.arange(j.size), j], b, wg.m_max)
        return WindowDone(b, value, float_sens, spread, spread)

    return WindowRows(scores, 2.0 * e_w, e_w, e_n, finish)


def plan_variance_window(info: CountsInfo, U: float, eps: float, window_share: float) -> Draft:
    """Public plan (module docstring); the window is drawn at release."""

    def rows(
        wg: WindowGrids, x: np.ndarray, first: np.ndarray, groups: dict[int, np.ndarray]
    ) -> WindowRows:
        return variance_window_rows(wg, x, first, U, eps, window_share, groups)

    return window_draft("variance", NAME, info, eps, window_share, rows)


def window_variance_widths(
    info: CountsInfo, U: float, eps: float, window_share: float
) -> np.ndarray:
    """:func:`window_widths` of the ``window`` variance on these counts."""
    out: np.ndarray = window_variance_grid_widths(WindowGrids.one(info), U, eps, window_share)[0]
    return out


def window_variance_grid_widths(
    wg: WindowGrids, U: float, eps: float, window_share: float
) -> np.ndarray:
    """:func:`window_widths` of the ``window`` variance on every grid of ``wg``."""
    first = np.zeros(wg.m.size, dtype=np.int64)
    np.cumsum(wg.m[:-1], out=first[1:])
    x = np.zeros(int(wg.m.sum()))
    rows = variance_window_rows(wg, x, first, U, eps, window_share, wg.by_size())
    return window_widths(rows.finish, wg.L.size, len(VARIANCE_WINDOW_FRACTIONS), rows.eps_noise)
