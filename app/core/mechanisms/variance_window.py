"""``window`` variance: a weighted mixture variance of records clipped to a private ``[0, b]``.

Pure ``ε``-DP at the user level (proofs: docs/math.md §11). Public, from counts:
``k`` = the median count, weights ``w_l = min(m_l, k)/Σ min(m_l, k)`` (capped per-user
weights, Cummings, Feldman, McMillan and Talwar, NeurIPS 2022), candidates
``b_j = U·{1/4, 1/3, 1/2, 2/3, 1}``, ``ε_w = window_share·ε`` and ``ε_n = ε - ε_w``.

1. **window** (``ε_w``): integer scores ``q_j = -#{l: max_l x > b_j} - round(Δ_j L/(ε_n U δ))``
   with ``δ = U/32``, ``Δ_j`` the sensitivity below at ``b_j``: users whose largest
   record the window would clip, against the noise it costs (public term). One user
   moves every ``q_j`` by at most 1, all in the same direction (monotone scores):
   report-noisy-max is ``ε_w``-DP (:func:`app.core.mechanisms.mean_window.monotone_noisy_max`).
2. **estimate** (``ε_n``): every record clipped to ``[0, b]``, ``v_l`` and ``q_l`` the
   mean and mean square of user ``l``'s clipped records;
   ``V = Σ_l w_l q_l - (Σ_l w_l v_l)²`` is the population variance of the mixture
   ``Σ_l w_l P_l`` of the users' clipped empirical laws. Replacing one component of
   weight ``w`` moves it by at most ``b² w(1 - w)`` (``w <= 1/2``) or ``b²/4``
   (004 Prop III.1's argument with weights in place of ``m/n``; exact), so
   ``Δ = b² w*(1 - w*)`` or ``b²/4`` with ``w* = max_l w_l``. ``V + Lap(Δ/ε_n)``.

**Interval** (docs/math.md §11.6). The window choice bounds, with probability ``1 - β``,
how many users it clips (:func:`app.core.mechanisms.mean_window.clipped_bound`: the scores are
monotone counts and the top window clips nobody). Given at most ``A`` clipped users,
the truth (the population variance of *all* the grid's records) and ``V`` are variances
of two laws that share the unclipped users' common mass; :func:`variance_spread` bounds
their difference by the mixture argument of the sensitivity, applied twice.
"""

from __future__ import annotations

import math

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.data.results import BiasSpread
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import exact_sum, float_variance_sensitivity
from app.core.mechanisms.mean_window import (
    SPREAD_BETA,
    clipped_bound,
    monotone_noisy_max,
    split_share,
    window_details,
    window_weights,
)
from app.core.noise.laplace import NoiseSource, calibrate_scale

__all__ = [
    "VARIANCE_WINDOW_FRACTIONS",
    "mixture_variance",
    "mixture_variance_sensitivity",
    "plan_variance_window",
    "variance_spread",
    "window_variance_widths",
]

NAME = "window"
VARIANCE_WINDOW_FRACTIONS = (0.25, 1.0 / 3.0, 0.5, 2.0 / 3.0, 1.0)
VARIANCE_STEP_FRACTION = 1.0 / 32.0  # the score's unit: an average user clipped by U/32


def mixture_variance_sensitivity(b: float, w_max: float) -> float:
    """``b² w*(1 - w*)`` when ``w* <= 1/2``, else ``b²/4``."""
    if w_max <= 0.5:
        return b * b * w_max * (1.0 - w_max)
    return b * b / 4.0


def variance_spread(
    info: CountsInfo, U: float, w: np.ndarray, b: float, clipped_at_most: int
) -> BiasSpread:
    """``|σ² - V| <= Δ_U(t_U) + Δ_b(t_b)`` when at most ``clipped_at_most`` users have a
    record above ``b`` (docs/math.md §11.6), every record in ``[0, U]``.

    ``σ²`` is the population variance of all ``n`` records (law ``P``: user ``l``'s kept
    records with mass ``p_l = eff_l/n``, the capped ones with mass ``d``), ``V`` that of
    ``Q = Σ w_l Q_l`` (clipped kept records). An unclipped user's records are the same in
    both, so ``P`` and ``Q`` share ``R = Σ_unclipped min(p_l, w_l) P_l`` (mass ``r``).
    Through ``M`` = ``P`` with its part that may leave ``[0, b]`` (clipped users and
    capped records, mass ``t_U``) moved into ``[0, b]``: ``P`` and ``M`` differ in mass
    ``t_U`` on ``[0, U]``, ``M`` and ``Q`` in mass ``t_b = 1 - r`` on ``[0, b]``; replacing
    mass ``t`` of a law on ``[0, c]`` moves its variance by at most
    ``Δ_c(t) = c² t(1 - t)`` (``t <= 1/2``) or ``c²/4`` (the sensitivity argument of
    :func:`mixture_variance_sensitivity`). Both bounds grow with every clipped user, so
    the ``A`` largest ``p_l`` and ``min(p_l, w_l)`` bound them over every set of ``A``."""
    n = float(info.n)
    p = info.eff[info.active] / n
    a = max(0, int(clipped_at_most))
    top_p = float(np.sort(p)[::-1][:a].sum())
    common = np.minimum(p, w)
    top_common = float(np.sort(common)[::-1][:a].sum())
    t_U = min(1.0, info.dropped / n + top_p)
    t_b = min(1.0, max(0.0, 1.0 - float(common.sum()) + top_common))
    spread = mixture_variance_sensitivity(U, t_U) + mixture_variance_sensitivity(b, t_b)
    return BiasSpread(spread, spread, SPREAD_BETA)


def mixture_variance(weights: np.ndarray, means: np.ndarray, squares: np.ndarray) -> float:
    """``Σ w_l q_l - (Σ w_l v_l)²`` with exact sums, never below 0 (docs/math.md §9.5)."""
    mu = exact_sum(weights * means)
    return max(exact_sum(weights * squares) - mu * mu, 0.0)


def _kept_values(grid: GridData, info: CountsInfo) -> tuple[np.ndarray, np.ndarray]:
    """The values of every active user's earliest ``eff_l`` records (grouped by user) and
    where each active user's group starts."""
    keep = grid.record_rank < info.eff[grid.record_user]
    m = info.eff[info.active]
    starts = np.zeros(m.size, dtype=np.int64)
    np.cumsum(m[:-1], out=starts[1:])
    return grid.values[keep], starts


def _penalties(info: CountsInfo, U: float, e_n: float) -> tuple[np.ndarray, np.ndarray]:
    """The candidates' sensitivities and the public part of their scores."""
    w_max = float(window_weights(info).max())
    bounds = U * np.asarray(VARIANCE_WINDOW_FRACTIONS)
    # Python floats: the same IEEE products as numpy scalars, ~10x faster per grid
    sens = np.array([mixture_variance_sensitivity(b, w_max) for b in bounds.tolist()])
    delta = VARIANCE_STEP_FRACTION * U
    pen = np.round(sens * info.active.size / (e_n * U * delta)).astype(np.int64)
    return sens, pen


def window_variance_widths(
    info: CountsInfo, U: float, eps: float, window_share: float
) -> np.ndarray:
    """The ci95 width (before projection) for each window the choice can make: public."""
    e_w, e_n = split_share(eps, window_share)
    w = window_weights(info)
    sens, pen = _penalties(info, U, e_n)
    out = np.empty(sens.size)
    for j, frac in enumerate(VARIANCE_WINDOW_FRACTIONS):
        a = min(info.active.size, clipped_bound(pen, j, e_w))
        spread = variance_spread(info, U, w, U * frac, a)
        q = calibrate_scale(float(sens[j]), e_n) * math.log(1.0 / (0.05 - SPREAD_BETA))
        out[j] = 2.0 * q + spread.below + spread.above
    return out


def plan_variance_window(info: CountsInfo, U: float, eps: float, window_share: float) -> Draft:
    """WINDOW variance (module docstring): public plan; the window is drawn at release."""
    e_w, e_n = split_share(eps, window_share)
    active = info.active
    w = window_weights(info)
    bounds = U * np.asarray(VARIANCE_WINDOW_FRACTIONS)
    sens, pen = _penalties(info, U, e_n)
    details = window_details(info, window_share, e_w, e_n)

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        x, starts = _kept_values(grid, info)
        m = info.eff[active].astype(np.float64)
        top = np.sort(np.maximum.reduceat(x, starts))
        above = top.size - np.searchsorted(top, bounds, side="right")
        j = monotone_noisy_max(noise, (-above - pen).astype(np.int64), e_w)
        b = float(bounds[j])
        xc = np.minimum(x, b)
        means = np.add.reduceat(xc, starts) / m
        squares = np.add.reduceat(xc * xc, starts) / m
        spread = variance_spread(info, U, w, b, min(active.size, clipped_bound(pen, j, e_w)))
        extra: dict[str, object] = {"window_hi": b}
        value = mixture_variance(w, means, squares)
        sens_j = float_variance_sensitivity(float(sens[j]), b, info.m_max)  # exact sums' allowance
        return Estimate(value, sens_j, extra, spread)

    return Draft("variance", NAME, eps, e_n, None, None, info.eff.copy(), details, estimator)
