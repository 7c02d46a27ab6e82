"""``centred`` variance: per-user second moments about a private centre, clipped privately.

Pure ``ε``-DP at the user level (proofs: docs/math.md §11). Public, from counts:
``k`` = the median count, weights ``w_l = min(m_l, k)/Σ min(m_l, k)`` (capped per-user
weights, Cummings, Feldman, McMillan and Talwar, NeurIPS 2022), ``w* = max w_l``,
``L`` users; ``ε_c = centre_share·ε``, ``ε_q = moment_share·ε``, ``ε_n`` the rest.

1. **centre** (``ε_c``): candidates ``c_j = jU/32``; integer scores
   ``-max(#{v_l < c_j}, #{v_l > c_j})`` on the user means ``v_l`` (a private median,
   002 Alg. 3's cost on users; sensitivity 1): ``noisy_max`` at ``ε_c``.
2. **clip level** (``ε_q``): ``q_l = mean of (x - c)²`` over user ``l``'s records;
   candidates ``Q_j = (U²/4)·2^{-j}``, ``j = 0..J``; monotone integer scores
   ``-#{l: q_l > Q_j} - round((J - j)·1.25 w* L / ε_n)`` (each doubling of ``Q`` costs
   noise worth ``1.25 w* L/ε_n`` users clipped — the expected-error balance whose
   optimum clips about ``1.25/ε_n`` users, as ``T_ε`` in 003 Thm III.1); noisy max on
   monotone scores (:func:`app.core.mechanisms.mean_window.monotone_noisy_max`).
3. **estimate** (``ε_n``): ``r = √Q/4``,
   ``V = Σ_l w_l min(q_l, Q) - (Σ_l w_l clip(v_l - c, -r, r))²``. Replacing user ``l``
   moves the first sum by at most ``w_l Q`` and ``B = Σ w clip(·)`` (``|B| <= r``) by at
   most ``2 r w_l``, so ``B²`` by at most ``4 r² w_l = Q w_l/4``: ``Δ = 1.25 w* Q``.
   ``V + Lap(Δ/ε_n)``. Without clipping ``V`` is the weighted variance exactly
   (``Σ w q^c - (μ_w - c)²``), whatever ``c``.
"""

from __future__ import annotations

import math

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import exact_sum, float_variance_sensitivity, split_shares
from app.core.mechanisms.mean_window import monotone_noisy_max, window_weights
from app.core.mechanisms.variance_window import CI95_NOTE
from app.core.noise.laplace import NoiseSource

__all__ = [
    "CENTRE_STEPS",
    "centred_gate",
    "centred_variance_value",
    "moment_candidates",
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


def moment_candidates(U: float) -> np.ndarray:
    """``Q_j = (U²/4)·2^{-j}``, largest first."""
    return (U * U / 4.0) * np.exp2(-np.arange(MOMENT_OCTAVES + 1, dtype=np.float64))


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


def plan_variance_centred(
    info: CountsInfo, U: float, eps: float, centre_share: float, moment_share: float
) -> Draft:
    """CENTRED variance (module docstring): public plan; centre and clip level at release."""
    e_c, e_q, e_n = _shares(eps, centre_share, moment_share)
    active = info.active
    m = info.eff[active].astype(np.float64)
    w = window_weights(info)
    w_max = float(w.max())
    L = int(active.size)
    centres = np.arange(CENTRE_STEPS + 1, dtype=np.float64) * (U / CENTRE_STEPS)
    moments = moment_candidates(U)
    steps_up = np.arange(MOMENT_OCTAVES, -1, -1)  # doublings above the smallest Q
    pen = np.round(steps_up * centred_sensitivity(w_max, 1.0) * L / e_n).astype(np.int64)
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
        v = np.add.reduceat(x, starts) / m
        srt = np.sort(v)
        below = np.searchsorted(srt, centres, side="left")
        above = L - np.searchsorted(srt, centres, side="right")
        c_scores = -np.maximum(below, above).astype(np.int64)
        c = float(centres[noise.noisy_max(c_scores, e_c, sensitivity=1)])
        q = np.add.reduceat((x - c) ** 2, starts) / m
        qs = np.sort(q)
        clipped = L - np.searchsorted(qs, moments, side="right")
        j = monotone_noisy_max(noise, (-clipped - pen).astype(np.int64), e_q)
        Q = float(moments[j])
        value = centred_variance_value(w, v, q, c, Q)
        extra: dict[str, object] = {"centre": c, "moment_clip": Q, "ci95_note": CI95_NOTE}
        sens = float_variance_sensitivity(centred_sensitivity(w_max, Q), math.sqrt(Q), info.m_max)
        return Estimate(value, sens, extra)

    return Draft("variance", NAME, eps, e_n, None, None, info.eff.copy(), details, estimator)
