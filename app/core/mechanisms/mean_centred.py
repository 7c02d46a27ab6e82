"""``centred_clip``: user sums clipped to a window about a private centre, of private width.

003 Thm III.1's per-user clipping re-centred (docs/math.md §5.8, proofs there). Budget
``ε₁ + ε₂ + ε₃ = ε`` (``centre_share``, ``width_share``, the rest):

1. centre ``c`` (``ε₁``): a private median of the user means over ``jU/256``;
2. half-width ``R`` (``ε₂``): monotone noisy max over ``R_j`` (:func:`half_widths`, the top
   ``U m*`` clips nobody) on ``-#{users clipped} - penalty_j``;
3. ``θ = (1/n) Σ clip(S_l, lo_l, hi_l) + Lap(max(hi - lo)/(n ε₃))``.

The width choice bounds how many users are clipped, hence an honest ci95
(:func:`centred_spread`, docs/math.md §11.6). Below a public gate it *is*
worst_case_optimal.
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
from app.core.mechanisms.mean_projection import plan_worst_case_optimal
from app.core.mechanisms.mean_window import SPREAD_BETA, clipped_bound, monotone_noisy_max
from app.core.noise.laplace import NoiseSource

__all__ = [
    "CENTRE_CANDIDATES",
    "adaptive_gate",
    "centre_utility",
    "centred_spread",
    "centred_window",
    "clipped_counts",
    "half_widths",
    "plan_centred_clip",
    "width_candidates",
    "width_penalties",
]

NAME = "centred_clip"
CENTRE_CANDIDATES = 256  # c_j = jU/256, j = 0..256
WIDTH_STEPS_PER_OCTAVE = 4
WIDTH_LOW_OCTAVES = 8  # smallest ρ is U 2^-8
WIDTH_STEP = 1.0 / 256.0  # δ = U/256: the unit of clipping in the width score
GATE_MARGIN = 3.0


def adaptive_gate(n_users: int, eps_centre: float) -> bool:
    """``ε₁ L >= 4 (ln(#centre candidates) + 3)``: public counts and ``ε`` only."""
    need = 4.0 * (math.log(CENTRE_CANDIDATES + 1) + GATE_MARGIN)
    return eps_centre * n_users >= need * (1.0 - 1e-12)


def centre_candidates(U: float) -> np.ndarray:
    """The public centres ``jU/256``, ``j = 0..256``."""
    return np.arange(CENTRE_CANDIDATES + 1, dtype=np.float64) * (U / CENTRE_CANDIDATES)


def centre_utility(user_means: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """``u₁(c) = -max(#{v_l < c}, #{v_l > c})`` at every candidate (sensitivity 1)."""
    v = np.sort(np.asarray(user_means, dtype=np.float64))
    below = np.searchsorted(v, cands, side="left")
    above = v.size - np.searchsorted(v, cands, side="right")
    return -np.maximum(below, above).astype(np.int64)


def width_candidates(U: float, m_max: int) -> np.ndarray:
    """``ρ_j = U 2^{j/4}`` from ``U 2^-8`` up to the first one >= ``U √m*``."""
    top = math.ceil(WIDTH_STEPS_PER_OCTAVE * 0.5 * math.log2(max(m_max, 1)) - 1e-9)
    j = np.arange(-WIDTH_LOW_OCTAVES * WIDTH_STEPS_PER_OCTAVE, max(top, 0) + 1)
    return U * np.exp2(j / WIDTH_STEPS_PER_OCTAVE)


def half_widths(U: float, m_max: int, width_factor: float) -> np.ndarray:
    """The candidate ``R_j = width_factor·ρ_j·√m*`` below ``U m*``, then ``U m*`` itself (a
    window that clips nobody), ascending (docs/math.md §5.8)."""
    R = width_factor * width_candidates(U, m_max) * math.sqrt(m_max)
    return np.append(R[U * m_max > R], U * m_max)


def centred_window(
    counts: np.ndarray, U: float, c: float, R: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``lo_l = max(0, c m_l - R)``, ``hi_l = min(U m_l, c m_l + R)`` (the box ∩ window);
    an array ``R`` gives one row per user and one column per ``R``."""
    m = np.asarray(counts, dtype=np.float64)
    if isinstance(R, np.ndarray):
        m = m[:, None]
    return np.maximum(0.0, c * m - R), np.minimum(U * m, c * m + R)


def clipped_counts(
    sums: np.ndarray, m: np.ndarray, U: float, c: float, R: np.ndarray
) -> np.ndarray:
    """``#{l: S_l ∉ [lo_l, hi_l]}`` at every ``R_j``: monotone counts (each user's term is
    clipped for every ``R`` below a threshold of its own)."""
    lo, hi = centred_window(m, U, c, R)
    s = sums[:, None]
    out: np.ndarray = ((s < lo) | (s > hi)).sum(axis=0).astype(np.int64)
    return out


def width_penalties(R: np.ndarray, L: int, n: int, e3: float, U: float) -> np.ndarray:
    """``round(2 R_j L/(n ε₃ δ))``, ``δ = U·WIDTH_STEP``: the Laplace scale at ``R_j`` in units of
    one average user clipped by ``δ`` per record (public)."""
    return np.round(2.0 * R * L / (n * e3 * WIDTH_STEP * U)).astype(np.int64)


def centred_spread(
    info: CountsInfo, U: float, lo: np.ndarray, hi: np.ndarray, clipped_at_most: int
) -> BiasSpread:
    """Bounds on ``μ - θ`` when at most ``A`` users are clipped (docs/math.md §5.8): a user
    clipped from above adds at most ``(U m_l - hi_l)/n``, from below at most ``lo_l/n``; the
    records the caps drop move the mean by at most ``U d/N``."""
    a = max(0, int(clipped_at_most))
    n, N = float(info.n_eff), float(info.n)
    m = info.eff[info.active].astype(np.float64)
    drop = U * info.dropped / N
    below = float(np.sort(lo)[::-1][:a].sum()) / n
    above = float(np.sort(U * m - hi)[::-1][:a].sum()) / n
    return BiasSpread(below + drop, above + drop, SPREAD_BETA)


def _shares(eps: float, centre_share: float, width_share: float) -> tuple[float, float, float]:
    if not (0.0 < centre_share < 1.0 and 0.0 < width_share < 1.0):
        raise ValueError("centre_share and width_share must lie in (0, 1)")
    if centre_share + width_share >= 1.0:
        raise ValueError(
            "centre_share + width_share must be below 1 (the rest is the Laplace step's); "
            f"got {centre_share} + {width_share}"
        )
    e1, e2, e3 = split_shares(eps, (centre_share, width_share))
    return e1, e2, e3


def plan_centred_clip(
    info: CountsInfo,
    U: float,
    eps: float,
    centre_share: float,
    width_share: float,
    width_factor: float,
) -> Draft:
    """Public plan (module docstring); the centre and width are drawn at release."""
    e1, e2, e3 = _shares(eps, centre_share, width_share)
    if not width_factor > 0:
        raise ValueError(f"width_factor must be > 0, got {width_factor}")
    base: dict[str, object] = {
        "centre_share": centre_share,
        "width_share": width_share,
        "width_factor": width_factor,
    }
    if not adaptive_gate(info.n_active, e1):
        wco = plan_worst_case_optimal(info, U, eps, True)
        details = {**wco.details, **base, "path": "worst_case_optimal (gate not met)"}
        return Draft(
            "mean",
            NAME,
            eps,
            wco.eps_noise,
            wco.sensitivity,
            wco.bias,
            wco.kept,
            details,
            wco.estimator,
        )
    active = info.active
    m = info.eff[active].astype(np.float64)
    n = float(info.n_eff)
    m_max = info.m_max
    c_cands = centre_candidates(U)
    R_cands = half_widths(U, m_max, width_factor)
    pen = width_penalties(R_cands, int(active.size), info.n_eff, e3, U)
    details = {
        **base,
        "path": "adaptive",
        "eps_centre": e1,
        "eps_width": e2,
        "eps_noise": e3,
    }

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        # user l's sum from its values only, clamped into [0, U m_l] (post-processing)
        sums = np.clip(isolated_head_sums(grid, info.eff)[active], 0.0, U * m)
        c = float(c_cands[noise.noisy_max(centre_utility(sums / m, c_cands), e1)])
        j = monotone_noisy_max(noise, -clipped_counts(sums, m, U, c, R_cands) - pen, e2)
        R = float(R_cands[j])
        lo, hi = centred_window(m, U, c, R)
        value = exact_sum(np.clip(sums, lo, hi)) / n
        sens = float_sum_sensitivity(float((hi - lo).max()) / n, U)
        spread = centred_spread(info, U, lo, hi, min(m.size, int(clipped_bound(pen, j, e2))))
        extra: dict[str, object] = {"centre": c, "half_width": R}
        return Estimate(min(max(value, 0.0), U), sens, extra, spread)

    kept = info.eff.copy()
    return Draft("mean", NAME, eps, e3, None, None, kept, details, estimator)
