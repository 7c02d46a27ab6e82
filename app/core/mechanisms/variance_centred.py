"""``centred`` variance: per-user second moments about a private centre, clipped privately.

Capped weights ``w_l = min(m_l, k)/Σ min(m_l, k)`` (``k`` the median count; Cummings,
Feldman, McMillan and Talwar, NeurIPS 2022). Budget ``ε_c + ε_q + ε_n = ε``:

1. centre ``c`` (``ε_c``): a private median of the user means (clamped to ``[0, U]``)
   over ``jU/32``;
2. clip level ``Q`` (``ε_q``): monotone noisy max over ``Q_j`` (:func:`moment_levels`, the
   top clips nobody) on ``-#{l: q_l > Q_j} - penalty_j``;
3. ``V = Σ w min(q, Q) - (Σ w clip(v - c, ±√Q/4))² + Lap(1.25 w* Q/ε_n)``.

Proofs, sensitivity and the honest interval (:func:`centred_variance_spread`):
docs/math.md §11.4 and §11.6.
"""

from __future__ import annotations

import math

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.data.results import BiasSpread
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import exact_sum, float_variance_sensitivity, split_shares
from app.core.mechanisms.mean_window import (
    SPREAD_BETA,
    clipped_bound,
    monotone_noisy_max,
    window_weights,
)
from app.core.mechanisms.variance_window import mixture_variance_sensitivity
from app.core.noise.laplace import NoiseSource

__all__ = [
    "CENTRE_STEPS",
    "centred_gate",
    "centred_variance_spread",
    "centred_variance_value",
    "moment_levels",
    "plan_variance_centred",
]

NAME = "centred"
CENTRE_STEPS = 32  # c_j = jU/32, j = 0..32
MOMENT_OCTAVES = 12  # Q_j = (U²/4) 2^-j, j = 0..12
RADIUS = 0.25  # r = RADIUS·√Q: the user means' clip radius about the centre
GATE = 4.0 * (math.log(CENTRE_STEPS + 1) + 3.0)  # ε_c L must reach it (≈ 26)


def centred_gate(n_users: int, eps_centre: float) -> bool:
    """``ε_c L >= 4(ln 33 + 3)``: enough users for the private centre (public)."""
    return eps_centre * n_users >= GATE * (1.0 - 1e-12)


def moment_levels(U: float, c: float) -> np.ndarray:
    """``Q_j = (U²/4)·2^{-j}`` (``j = 12..0``), then ``D²(1 + 10⁻⁹)`` with ``D = max(c, U - c)``:
    ascending; the top clips no ``q_l <= D²``."""
    D = max(c, U - c)
    low = (U * U / 4.0) * np.exp2(-np.arange(MOMENT_OCTAVES, -1, -1, dtype=np.float64))
    return np.append(low, D * D * (1.0 + 1e-9))


def _shares(eps: float, centre_share: float, moment_share: float) -> tuple[float, float, float]:
    if not (0.0 < centre_share < 1.0 and 0.0 < moment_share < 1.0):
        raise ValueError("centre_share and moment_share must lie in (0, 1)")
    if centre_share + moment_share >= 1.0:
        raise ValueError("centre_share + moment_share must be below 1")
    e_c, e_q, e_n = split_shares(eps, (centre_share, moment_share))
    return e_c, e_q, e_n


def centred_variance_value(
    w: np.ndarray, v: np.ndarray, q: np.ndarray, c: float, Q: float
) -> float:
    """``Σ w min(q, Q) - (Σ w clip(v - c, -r, r))²`` with ``r = √Q/4``, floored at 0."""
    r = RADIUS * math.sqrt(Q)
    b = exact_sum(w * np.clip(v - c, -r, r))
    return max(exact_sum(w * np.minimum(q, Q)) - b * b, 0.0)


def centred_sensitivity(w_max: float, Q: float) -> float:
    """``w* Q + 4 r² w* = w* Q (1 + 4·RADIUS²)`` (= ``1.25 w* Q``)."""
    return w_max * Q * (1.0 + 4.0 * RADIUS * RADIUS)


def centred_variance_spread(
    info: CountsInfo, U: float, w: np.ndarray, c: float, Q: float, clipped_at_most: int
) -> BiasSpread:
    """Bounds on ``σ² - V`` (docs/math.md §11.6) when at most ``A`` users have ``q_l > Q``:
    the weights' mismatch ``Δ_U(1 - Σ min(p_l, w_l))``; ``W_A (D² - Q)_+`` above (``W_A`` the
    ``A`` largest weights); the centre term moved by ``δ <= W_A (D - r)_+ + 3r``, so
    ``2rδ + δ²`` below and ``min(2rδ, r²)`` above (``r = √Q/4``, ``D = max(c, U - c)``)."""
    p = info.eff[info.active] / float(info.n)
    mix = float(
        mixture_variance_sensitivity(U, min(1.0, max(0.0, 1.0 - float(np.minimum(p, w).sum()))))
    )
    W = float(np.sort(w)[::-1][: max(0, int(clipped_at_most))].sum())
    D = max(c, U - c)
    r = RADIUS * math.sqrt(Q)
    d = W * max(0.0, D - r) + 3.0 * r
    below = mix + 2.0 * r * d + d * d
    above = mix + W * max(0.0, D * D - Q) + min(2.0 * r * d, r * r)
    return BiasSpread(below, above, SPREAD_BETA)


def plan_variance_centred(
    info: CountsInfo, U: float, eps: float, centre_share: float, moment_share: float
) -> Draft:
    """Public plan (module docstring); the centre and clip level are drawn at release."""
    e_c, e_q, e_n = _shares(eps, centre_share, moment_share)
    active = info.active
    m = info.eff[active].astype(np.float64)
    w = window_weights(info)
    w_max = float(w.max())
    L = int(active.size)
    centres = np.arange(CENTRE_STEPS + 1, dtype=np.float64) * (U / CENTRE_STEPS)
    unit = centred_sensitivity(w_max, 1.0) * L / e_n  # one doubling of Q, in users clipped
    q_min = U * U / 4.0 * 2.0**-MOMENT_OCTAVES
    details: dict[str, object] = {
        "k": info.median(),
        "eps_centre": e_c,
        "eps_moment": e_q,
        "eps_noise": e_n,
    }

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        keep = grid.record_rank < info.eff[grid.record_user]
        x = grid.values[keep]
        starts = np.zeros(L, dtype=np.int64)
        np.cumsum(info.eff[active][:-1], out=starts[1:])
        v = np.clip(np.add.reduceat(x, starts) / m, 0.0, U)  # post-processing of user l's values
        srt = np.sort(v)
        below = np.searchsorted(srt, centres, side="left")
        above = L - np.searchsorted(srt, centres, side="right")
        c_scores = -np.maximum(below, above).astype(np.int64)
        c = float(centres[noise.noisy_max(c_scores, e_c, sensitivity=1)])
        q = np.add.reduceat((x - c) ** 2, starts) / m
        levels = moment_levels(U, c)
        pen = np.round(np.log2(levels / q_min) * unit).astype(np.int64)
        clipped = L - np.searchsorted(np.sort(q), levels, side="right")
        j = monotone_noisy_max(noise, (-clipped - pen).astype(np.int64), e_q)
        Q = float(levels[j])
        value = centred_variance_value(w, v, q, c, Q)
        A = min(L, int(clipped_bound(pen, j, e_q)))
        spread = centred_variance_spread(info, U, w, c, Q, A)
        extra: dict[str, object] = {"centre": c, "moment_clip": Q}
        sens = float_variance_sensitivity(centred_sensitivity(w_max, Q), math.sqrt(Q), info.m_max)
        return Estimate(value, sens, extra, spread)

    return Draft("variance", NAME, eps, e_n, None, None, info.eff.copy(), details, estimator)
