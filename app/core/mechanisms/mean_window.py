"""``user_window``: weighted user means clipped to a privately chosen window ``[0, b]``.

A data-adaptive, pure ``ε``-DP (user level, replace-one-user's-values neighbours)
mean for grids of any size, built for real bus data where many user means sit near 0
and few near ``U`` (proofs: docs/math.md §11). Public first, from the counts:

* ``k`` = the median count, ``Γ_l = min(m_l, k)``, weights ``w_l = Γ_l / ΣΓ`` (per-user
  weights as in Cummings, Feldman, McMillan and Talwar, "Mean Estimation with
  User-level Privacy under Data Heterogeneity", NeurIPS 2022: a user's weight grows
  with its records up to a cap);
* candidates ``b_j = U·{1/6, 1/3, 1/2, 2/3, 1}`` and the budget split
  ``ε_w = window_share·ε`` (window), ``ε_n = ε - ε_w`` (Laplace).

Then, with the values:

1. user means ``v_l = S_l / m_l`` over all of user ``l``'s records (002's
   ``user_mean_fill``), clamped to ``[0, U]`` (a float mean of values at ``U`` can
   round above it; clamping is post-processing of that user's values);
2. **window** (``ε_w``): integer scores
   ``q_j = -#{l: v_l > b_j} - round(b_j w* L / (ε_n δ))`` with ``δ = U/16`` and
   ``w* = max_l w_l`` — users the window would clip, against the noise it costs in
   units of one average user clipped by ``δ`` (a public term); one user moves every
   ``q_j`` by at most 1 and all in the same direction (monotone scores), so
   report-noisy-max is ``ε_w``-DP (:func:`monotone_noisy_max`);
3. **estimate** (``ε_n``): ``θ = Σ_l w_l min(v_l, b) + Lap(b w* / ε_n)``: user ``l``'s
   term lies in ``[0, w_l b]`` whatever its values, so the sensitivity is exactly
   ``b w*``.

Sequential composition: ``ε_w + ε_n = ε``. Everyone with records is read and charged.
Clipping at a private ``b`` has no data-independent bias bound: ``worst_case_bias``
and ``worst_case_error`` are ``None``. ``ci95`` is honest all the same: report-noisy-max
lands within ``s ln(C/β)`` of the best score with probability ``1 - β``, which bounds
how many users the chosen window clips, and so the bias (:func:`window_spread`,
docs/math.md §11.6). The bound is loose above the estimate at small ``ε``: clipped
users could lie anywhere up to ``U``. The weighted sum is exact (:func:`exact_sum`) and
its sensitivity allows for the two roundings (docs/math.md §9.5).
"""

from __future__ import annotations

import math

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.data.results import BiasSpread
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import exact_sum, float_sum_sensitivity, split_shares
from app.core.mechanisms.interval import isolated_head_sums
from app.core.noise.laplace import NoiseSource, calibrate_choice_scale, calibrate_scale

__all__ = [
    "WINDOW_FRACTIONS",
    "plan_user_window",
    "split_share",
    "user_window_widths",
    "window_scores",
    "window_weights",
]

NAME = "user_window"
WINDOW_FRACTIONS = (1.0 / 6.0, 1.0 / 3.0, 0.5, 2.0 / 3.0, 1.0)
STEP_FRACTION = 1.0 / 16.0  # δ = U/16: the unit of clipping in the window score
SPREAD_BETA = 0.01  # ci95: 0.01 for the clipped-user bound, 0.04 for the Laplace noise


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
    U: float, bounds: np.ndarray, w_max: float, L: int, eps_n: float
) -> np.ndarray:
    """The public part of the scores: ``round(b_j w* L / (ε_n δ))`` (noise in clip units)."""
    delta = STEP_FRACTION * U
    return np.round(bounds * w_max * L / (eps_n * delta)).astype(np.int64)


def window_scores(user_means: np.ndarray, bounds: np.ndarray, penalties: np.ndarray) -> np.ndarray:
    """``q_j = -#{v_l > b_j} - penalty_j`` (integers; one user moves each by at most 1)."""
    v = np.sort(np.asarray(user_means, dtype=np.float64))
    above = v.size - np.searchsorted(v, bounds, side="right")
    out: np.ndarray = (-above.astype(np.int64) - penalties).astype(np.int64)
    return out


def monotone_noisy_max(noise: NoiseSource, scores: np.ndarray, eps: float) -> int:
    """An ``eps``-DP choice among integer scores that are **monotone** with sensitivity 1.

    Monotone: between any two neighbours either every score rises or every score falls
    (by at most 1 each). Counts ``#{l: x_l > b_j}`` over one per-user statistic ``x_l``
    are: one user's ``x_l`` moving from ``x`` to ``y > x`` adds 1 to the counts with
    ``b_j ∈ [x, y)`` and nothing elsewhere. For such scores report-noisy-max run at
    ``2·eps`` (the level it guarantees for arbitrary sensitivity-1 scores) is
    ``eps``-DP: the exponential mechanism's factor 2 is only needed when scores can
    move in opposite directions (McSherry and Talwar 2007; Dwork and Roth, "The
    Algorithmic Foundations of Differential Privacy", Claim 3.9 for noisy max on
    counting queries; OpenDP's ``make_noisy_max`` privacy map with ``monotonic=True``).
    """
    return noise.noisy_max(scores, 2.0 * eps, sensitivity=1)


def window_spread(
    info: CountsInfo,
    U: float,
    w: np.ndarray,
    b: float,
    clipped_at_most: int,
) -> BiasSpread:
    """Bounds on ``μ - T`` (docs/math.md §11.6): ``μ`` the mean of *all* the grid's records
    (capped and suppressed ones included), ``T = Σ w_l min(v_l, b)`` over the kept ones,
    when at most ``clipped_at_most`` users have ``v_l > b``; every value in ``[0, U]``.

    With ``p_l = eff_l/n`` and ``d = Σ(m_l - eff_l)/n``, user ``l`` adds
    ``p_l v_l - w_l min(v_l, b)`` (at least ``min(0, (p_l - w_l) b)``; at most
    ``g_l = max(0, (p_l - w_l) b)`` unclipped and ``p_l U - w_l b`` clipped) and the
    dropped records add ``[0, U d]``."""
    n = float(info.n)
    p = info.eff[info.active] / n
    g = np.maximum(0.0, (p - w) * b)
    extra = np.sort(np.maximum(0.0, p * U - w * b - g))[::-1]
    below = float(np.maximum(0.0, (w - p) * b).sum())
    above = U * info.dropped / n + float(g.sum()) + float(extra[:clipped_at_most].sum())
    return BiasSpread(below, above, SPREAD_BETA)


def clipped_bound(pen: np.ndarray, j: int, eps_w: float) -> int:
    """At most this many users have ``v_l > b_j`` when ``j`` is chosen, with probability
    ``1 - β`` (docs/math.md §11.6). The top window ``b = U`` clips nobody, so its score is
    ``-pen_top``; a chosen ``j`` beat it, ``q_j + Z_j >= q_top + Z_top``, so
    ``#{v_l > b_j} > pen_top - pen_j + t`` needs ``Z_j - Z_top > t``. With OpenDP's
    exponential noise of scale ``s`` (:func:`monotone_noisy_max`) that difference is
    Laplace: ``P = e^{-t/s}/2`` for each of the ``C - 1`` other windows, and
    ``t = s ln((C - 1)/(2β))`` makes their union at most ``β``."""
    s = calibrate_choice_scale(1, 2.0 * eps_w)
    slack = s * math.log((pen.size - 1) / (2.0 * SPREAD_BETA))
    return max(0, math.floor(int(pen[-1]) - int(pen[j]) + slack))


def window_details(
    info: CountsInfo, window_share: float, e_w: float, e_n: float
) -> dict[str, object]:
    """What a window mechanism (mean or variance) reports of its public plan."""
    return {"k": info.median(), "window_share": window_share, "eps_window": e_w, "eps_noise": e_n}


def _public_plan(
    info: CountsInfo, U: float, eps: float, window_share: float
) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray]:
    """``(ε_w, ε_n, weights, candidate windows, penalties)``: everything public."""
    e_w, e_n = split_share(eps, window_share)
    w = window_weights(info)
    bounds = U * np.asarray(WINDOW_FRACTIONS)
    pen = window_penalties(U, bounds, float(w.max()), int(info.active.size), e_n)
    return e_w, e_n, w, bounds, pen


def plan_user_window(info: CountsInfo, U: float, eps: float, window_share: float) -> Draft:
    """USER_WINDOW (module docstring): public plan; the window is drawn at release."""
    e_w, e_n, w, bounds, pen = _public_plan(info, U, eps, window_share)
    active = info.active
    m = info.eff[active].astype(np.float64)
    w_max = float(w.max())
    details = window_details(info, window_share, e_w, e_n)

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        # user l's mean from its values only, clamped into [0, U] (post-processing)
        v = np.clip(isolated_head_sums(grid, info.eff)[active] / m, 0.0, U)
        j = monotone_noisy_max(noise, window_scores(v, bounds, pen), e_w)
        b = float(bounds[j])
        value = exact_sum(w * np.minimum(v, b))
        spread = window_spread(info, U, w, b, min(active.size, clipped_bound(pen, j, e_w)))
        return Estimate(value, float_sum_sensitivity(b * w_max, b), {"window_hi": b}, spread)

    return Draft("mean", NAME, eps, e_n, None, None, info.eff.copy(), details, estimator)


def user_window_widths(info: CountsInfo, U: float, eps: float, window_share: float) -> np.ndarray:
    """The width of the ci95 (before projection) for each window the choice can make: public
    (docs/math.md §11.6): ``2q + below + above`` with at most ``clipped_bound`` users clipped."""
    e_w, e_n, w, bounds, pen = _public_plan(info, U, eps, window_share)
    w_max = float(w.max())
    out = np.empty(bounds.size)
    for j, b in enumerate(bounds.tolist()):
        spread = window_spread(info, U, w, b, min(info.active.size, clipped_bound(pen, j, e_w)))
        scale = calibrate_scale(float_sum_sensitivity(b * w_max, b), e_n)
        q = scale * math.log(1.0 / (0.05 - SPREAD_BETA))
        out[j] = 2.0 * q + spread.below + spread.above
    return out
