"""``window`` variance: a weighted mixture variance of records clipped to a private ``[0, b]``.

Pure ``ε``-DP at the user level (proofs: docs/math.md §11). Public, from counts:
``k`` = the median count, weights ``w_l = min(m_l, k)/Σ min(m_l, k)`` (capped per-user
weights, Cummings, Feldman, McMillan and Talwar, NeurIPS 2022), candidates
``b_j = U·{1/4, 1/3, 1/2, 2/3, 1}``, ``ε_w = window_share·ε`` and ``ε_n = ε - ε_w``.

1. **window** (``ε_w``): integer scores ``q_j = -#{l: max_l x > b_j} - round(Δ_j L/(ε_n U δ))``
   with ``δ = U/32``, ``Δ_j`` the sensitivity below at ``b_j``: users whose largest
   record the window would clip, against the noise it costs (public term). One user
   moves every ``q_j`` by at most 1, all in the same direction (monotone scores):
   report-noisy-max is ``ε_w``-DP (:func:`app.core.mean_window.monotone_noisy_max`).
2. **estimate** (``ε_n``): every record clipped to ``[0, b]``, ``v_l`` and ``q_l`` the
   mean and mean square of user ``l``'s clipped records;
   ``V = Σ_l w_l q_l - (Σ_l w_l v_l)²`` is the population variance of the mixture
   ``Σ_l w_l P_l`` of the users' clipped empirical laws. Replacing one component of
   weight ``w`` moves it by at most ``b² w(1 - w)`` (``w <= 1/2``) or ``b²/4``
   (004 Prop III.1's argument with weights in place of ``m/n``; exact), so
   ``Δ = b² w*(1 - w*)`` or ``b²/4`` with ``w* = max_l w_l``. ``V + Lap(Δ/ε_n)``.
"""

from __future__ import annotations

import numpy as np

from app.core.counts import CountsInfo
from app.core.draft import Draft, Estimate
from app.core.grid import GridData
from app.core.mean_window import (
    monotone_noisy_max,
    split_share,
    window_details,
    window_weights,
)
from app.core.noise import NoiseSource

CI95_NOTE = (
    "no honest 95% interval: the estimate clips at a privately chosen level, a bias "
    "with no data-independent bound; the Laplace part alone is estimate ± noise_scale·ln 20"
)

__all__ = [
    "VARIANCE_WINDOW_FRACTIONS",
    "mixture_variance",
    "mixture_variance_sensitivity",
    "plan_variance_window",
]

NAME = "window"
VARIANCE_WINDOW_FRACTIONS = (0.25, 1.0 / 3.0, 0.5, 2.0 / 3.0, 1.0)
VARIANCE_STEP_FRACTION = 1.0 / 32.0  # the score's unit: an average user clipped by U/32


def mixture_variance_sensitivity(b: float, w_max: float) -> float:
    """``b² w*(1 - w*)`` when ``w* <= 1/2``, else ``b²/4``."""
    if w_max <= 0.5:
        return b * b * w_max * (1.0 - w_max)
    return b * b / 4.0


def mixture_variance(weights: np.ndarray, means: np.ndarray, squares: np.ndarray) -> float:
    """``Σ w_l q_l - (Σ w_l v_l)²``, never below 0 (rounding)."""
    mu = float(np.dot(weights, means))
    return max(float(np.dot(weights, squares)) - mu * mu, 0.0)


def _kept_values(grid: GridData, info: CountsInfo) -> tuple[np.ndarray, np.ndarray]:
    """The values of every active user's earliest ``eff_l`` records (grouped by user) and
    where each active user's group starts."""
    keep = grid.record_rank < info.eff[grid.record_user]
    m = info.eff[info.active]
    starts = np.zeros(m.size, dtype=np.int64)
    np.cumsum(m[:-1], out=starts[1:])
    return grid.values[keep], starts


def plan_variance_window(info: CountsInfo, U: float, eps: float, window_share: float) -> Draft:
    """WINDOW variance (module docstring): public plan; the window is drawn at release."""
    e_w, e_n = split_share(eps, window_share)
    active = info.active
    w = window_weights(info)
    w_max = float(w.max())
    bounds = U * np.asarray(VARIANCE_WINDOW_FRACTIONS)
    # Python floats: the same IEEE products as numpy scalars, ~10x faster per grid
    sens = np.array([mixture_variance_sensitivity(b, w_max) for b in bounds.tolist()])
    delta = VARIANCE_STEP_FRACTION * U
    pen = np.round(sens * active.size / (e_n * U * delta)).astype(np.int64)
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
        extra: dict[str, object] = {"window_hi": b, "ci95_note": CI95_NOTE}
        return Estimate(mixture_variance(w, means, squares), float(sens[j]), extra)

    return Draft("variance", NAME, eps, e_n, None, None, info.eff.copy(), details, estimator)
