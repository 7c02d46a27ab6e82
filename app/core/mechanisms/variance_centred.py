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
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.data.results import BiasSpread
from app.core.data.window_grids import WindowGrids, row_sums, top_sums
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import (
    float_variance_sensitivities,
    grid_fsums,
    split_shares,
)
from app.core.mechanisms.mean_centred import centre_scores
from app.core.mechanisms.mean_window import SPREAD_BETA, clipped_bound
from app.core.mechanisms.variance_window import mixture_variance_sensitivity
from app.core.noise.laplace import NoiseSource
from app.core.noise.many import noisy_max_rows

__all__ = [
    "CENTRE_STEPS",
    "VarianceDone",
    "centred_gate",
    "centred_variance_rows",
    "centred_variance_shares",
    "centred_variance_spread",
    "centred_variance_spreads",
    "centred_variance_value",
    "centred_variance_values",
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


def centred_variance_shares(
    eps: float, centre_share: float, moment_share: float
) -> tuple[float, float, float]:
    """``(ε_c, ε_q, ε_n)`` of :func:`split_shares` (their exact sum at most ``ε``)."""
    if not (0.0 < centre_share < 1.0 and 0.0 < moment_share < 1.0):
        raise ValueError("centre_share and moment_share must lie in (0, 1)")
    if centre_share + moment_share >= 1.0:
        raise ValueError("centre_share + moment_share must be below 1")
    e_c, e_q, e_n = split_shares(eps, (centre_share, moment_share))
    return e_c, e_q, e_n


def centred_variance_value(
    w: np.ndarray, v: np.ndarray, q: np.ndarray, c: float, Q: float
) -> float:
    """``Σ w min(q, Q) - (Σ w clip(v - c, -r, r))²`` with ``r = √Q/4``, floored at 0: one
    grid's :func:`centred_variance_values`."""
    n = np.size(w)
    one = np.zeros(n, dtype=np.int64)
    got = centred_variance_values(w, v, q, np.array([c]), np.array([Q]), one, np.array([0, n]))
    return float(got[0])


def centred_variance_values(
    w: np.ndarray,
    v: np.ndarray,
    q: np.ndarray,
    c: np.ndarray,
    Q: np.ndarray,
    grid: np.ndarray,
    start: np.ndarray,
) -> np.ndarray:
    """:func:`centred_variance_value` of many grids (``c``, ``Q`` per grid; users grid
    after grid, ``grid`` of each, grid ``g``'s from ``start[g]``), each sum exact."""
    r = RADIUS * np.sqrt(Q)
    cu, ru = c[grid], r[grid]
    b = grid_fsums(w * np.clip(v - cu, -ru, ru), start)
    out: np.ndarray = np.maximum(grid_fsums(w * np.minimum(q, Q[grid]), start) - b * b, 0.0)
    return out


def centred_sensitivity(w_max: Any, Q: Any) -> Any:
    """``w* Q + 4 r² w* = w* Q (1 + 4·RADIUS²)`` (= ``1.25 w* Q``): numbers or arrays."""
    return w_max * Q * (1.0 + 4.0 * RADIUS * RADIUS)


def centred_variance_spread(
    info: CountsInfo, U: float, w: np.ndarray, c: float, Q: float, clipped_at_most: int
) -> BiasSpread:
    """Bounds on ``σ² - V`` (docs/math.md §11.6) when at most ``A`` users have ``q_l > Q``:
    one grid's :func:`centred_variance_spreads`."""
    wg = WindowGrids.one(info)
    a = np.array([max(0, int(clipped_at_most))])
    below, above = centred_variance_spreads(wg, U, w, np.array([c]), np.array([Q]), a, wg.by_size())
    return BiasSpread(float(below[0]), float(above[0]), SPREAD_BETA)


def centred_variance_spreads(
    wg: WindowGrids,
    U: float,
    w: np.ndarray,
    c: np.ndarray,
    Q: np.ndarray,
    a: np.ndarray,
    groups: dict[int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Per grid, bounds on ``σ² - V`` when at most ``a`` users have ``q_l > Q``: the
    weights' mismatch ``Δ_U(1 - Σ min(p_l, w_l))``; ``W_A (D² - Q)_+`` above (``W_A`` the
    ``A`` largest weights); the centre term moved by ``δ <= W_A (D - r)_+ + 3r``, so
    ``2rδ + δ²`` below and ``min(2rδ, r²)`` above (``r = √Q/4``, ``D = max(c, U - c)``)."""
    p = wg.m / wg.n[wg.grid].astype(np.float64)
    common = row_sums(wg, np.minimum(p, w), groups)
    mix = mixture_variance_sensitivity(U, np.minimum(1.0, np.maximum(0.0, 1.0 - common)))
    W = top_sums(wg, w, a, groups)
    D = np.maximum(c, U - c)
    r = RADIUS * np.sqrt(Q)
    d = W * np.maximum(0.0, D - r) + 3.0 * r
    below = mix + 2.0 * r * d + d * d
    above = mix + W * np.maximum(0.0, D * D - Q) + np.minimum(2.0 * r * d, r * r)
    return below, above


@dataclass(frozen=True)
class VarianceDone:
    """Per grid: the centre and clip level drawn, the noiseless estimate, its sensitivity
    and the bounds of its spread."""

    centre: np.ndarray
    moment_clip: np.ndarray
    value: np.ndarray
    sensitivity: np.ndarray
    below: np.ndarray
    above: np.ndarray


def centred_variance_rows(
    noise: NoiseSource,
    wg: WindowGrids,
    x: np.ndarray,
    first: np.ndarray,
    U: float,
    shares: tuple[float, float, float],
) -> VarianceDone:
    """The mechanism (module docstring) on every grid of ``wg``: ``x`` the kept records,
    user after user, user ``l``'s from ``first[l]``; ``shares`` ``(ε_c, ε_q, ε_n)``. Each
    choice is one noisy-max invocation per grid (one grid: a batch of one)."""
    e_c, e_q, e_n = shares
    G = wg.L.size
    m = wg.m.astype(np.float64)
    centres = np.arange(CENTRE_STEPS + 1, dtype=np.float64) * (U / CENTRE_STEPS)
    v = np.clip(np.add.reduceat(x, first) / m, 0.0, U)  # post-processing of user l's values
    (jc,) = noisy_max_rows(noise, [(centre_scores(v, wg.grid, wg.L, centres), e_c)])
    c = centres[jc]
    q = np.add.reduceat((x - np.repeat(c[wg.grid], wg.m)) ** 2, first) / m
    levels = np.stack([moment_levels(U, float(ci)) for ci in c.tolist()])
    unit = centred_sensitivity(wg.w_max, 1.0) * wg.L / e_n  # one doubling of Q, in users
    q_min = U * U / 4.0 * 2.0**-MOMENT_OCTAVES
    pen = np.round(np.log2(levels / q_min) * unit[:, None]).astype(np.int64)
    clipped = np.zeros_like(pen)
    for j in range(levels.shape[1]):
        clipped[:, j] = np.bincount(wg.grid[q > levels[wg.grid, j]], minlength=G)
    (jq,) = noisy_max_rows(noise, [((-clipped - pen).astype(np.int64), 2.0 * e_q)])
    Q = levels[np.arange(G), jq]
    value = centred_variance_values(wg.w, v, q, c, Q, wg.grid, wg.start)
    a = np.minimum(wg.L, clipped_bound(pen, jq, e_q))
    below, above = centred_variance_spreads(wg, U, wg.w, c, Q, a, wg.by_size())
    sens = float_variance_sensitivities(centred_sensitivity(wg.w_max, Q), np.sqrt(Q), wg.m_max)
    return VarianceDone(c, Q, value, sens, below, above)


def plan_variance_centred(
    info: CountsInfo, U: float, eps: float, centre_share: float, moment_share: float
) -> Draft:
    """Public plan (module docstring); the centre and clip level are drawn at release."""
    e_c, e_q, e_n = centred_variance_shares(eps, centre_share, moment_share)
    details: dict[str, object] = {
        "k": info.median(),
        "eps_centre": e_c,
        "eps_moment": e_q,
        "eps_noise": e_n,
    }

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        # the array rule on a batch of one
        wg = WindowGrids.one(info)
        x = grid.values[grid.record_rank < info.eff[grid.record_user]]  # kept, user by user
        first = np.zeros(wg.m.size, dtype=np.int64)
        np.cumsum(wg.m[:-1], out=first[1:])
        done = centred_variance_rows(noise, wg, x, first, U, (e_c, e_q, e_n))
        c, Q = float(done.centre[0]), float(done.moment_clip[0])
        spread = BiasSpread(float(done.below[0]), float(done.above[0]), SPREAD_BETA)
        extra: dict[str, object] = {"centre": c, "moment_clip": Q}
        return Estimate(float(done.value[0]), float(done.sensitivity[0]), extra, spread)

    return Draft("variance", NAME, eps, e_n, None, None, info.eff.copy(), details, estimator)
