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
from dataclasses import dataclass

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.data.results import BiasSpread
from app.core.data.window_grids import WindowGrids, top_sums
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import float_sum_sensitivities, grid_fsums, split_shares
from app.core.mechanisms.mean_projection import plan_worst_case_optimal
from app.core.mechanisms.mean_window import SPREAD_BETA, clipped_bound
from app.core.noise.laplace import NoiseSource
from app.core.noise.many import noisy_max_rows

__all__ = [
    "CENTRE_CANDIDATES",
    "CentredDone",
    "adaptive_gate",
    "centre_scores",
    "centre_utility",
    "centred_clip_rows",
    "centred_spread",
    "centred_spreads",
    "centred_window",
    "clipped_counts",
    "grid_clipped",
    "half_widths",
    "plan_centred_clip",
    "user_sums",
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
    """``u₁(c) = -max(#{v_l < c}, #{v_l > c})`` at every candidate (sensitivity 1): one
    grid's :func:`centre_scores`."""
    v = np.asarray(user_means, dtype=np.float64)
    one = np.zeros(v.size, dtype=np.int64)
    out: np.ndarray = centre_scores(v, one, np.array([v.size]), cands)[0]
    return out


def centre_scores(v: np.ndarray, grid: np.ndarray, L: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """:func:`centre_utility` of many grids (rows; ``grid`` of each user, ``L`` users per
    grid, ``cands`` ascending): ``v_l < c_j`` iff ``j >=`` the number of candidates
    ``<= v_l``, ``v_l > c_j`` iff ``j <`` the number ``< v_l``."""
    G, K = L.size, cands.size
    hist = np.bincount(
        grid * (K + 1) + np.searchsorted(cands, v, side="right"), minlength=G * (K + 1)
    )
    below = np.cumsum(hist.reshape(G, K + 1), axis=1)[:, :K]
    hist = np.bincount(
        grid * (K + 1) + np.searchsorted(cands, v, side="left"), minlength=G * (K + 1)
    )
    above = L[:, None] - np.cumsum(hist.reshape(G, K + 1), axis=1)[:, :K]
    out: np.ndarray = -np.maximum(below, above).astype(np.int64)
    return out


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
    counts: np.ndarray, U: float, c: float | np.ndarray, R: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``lo_l = max(0, c m_l - R)``, ``hi_l = min(U m_l, c m_l + R)`` (the box ∩ window);
    ``c`` and ``R`` a number or one per user."""
    m = np.asarray(counts, dtype=np.float64)
    cm = c * m
    return np.maximum(0.0, cm - R), np.minimum(U * m, cm + R)


def clipped_counts(
    sums: np.ndarray, m: np.ndarray, U: float, c: float, R: np.ndarray
) -> np.ndarray:
    """``#{l: S_l ∉ [lo_l, hi_l]}`` at every ``R_j``: monotone counts (each user's term is
    clipped for every ``R`` below a threshold of its own); one grid's :func:`grid_clipped`."""
    one = np.zeros(np.size(m), dtype=np.int64)
    out: np.ndarray = grid_clipped(sums, m, one, np.array([c]), np.asarray(R)[None, :], U)[0]
    return out


def grid_clipped(
    sums: np.ndarray, m: np.ndarray, grid: np.ndarray, c: np.ndarray, R: np.ndarray, U: float
) -> np.ndarray:
    """:func:`clipped_counts` of many grids: per grid (``c`` and the rows of ``R``,
    ascending; ``inf`` pads a row) and column ``j``, ``#{l: S_l ∉ [lo_l, hi_l]}`` at
    ``R[g, j]``. A user is clipped at every ``R`` below a threshold of its own (``lo``
    falls and ``hi`` rises with ``R``, rounding included), so each user's count of
    clipped columns is found by bisection on the same comparisons."""
    G, C = R.shape
    mf = np.asarray(m, dtype=np.float64)
    cm = c[grid] * mf  # centred_window's c·m, per user
    top = U * mf
    lo = np.zeros(grid.size, dtype=np.int64)  # clipped at every column below lo
    hi = np.full(grid.size, C, dtype=np.int64)  # not clipped from column hi on
    flat = grid * C
    while True:
        open_ = np.flatnonzero(lo < hi)
        if not open_.size:
            break
        mid = (lo[open_] + hi[open_]) // 2
        r = R.reshape(-1)[flat[open_] + mid]
        s, at = sums[open_], cm[open_]
        out = (s < np.maximum(0.0, at - r)) | (s > np.minimum(top[open_], at + r))
        lo[open_[out]] = mid[out] + 1
        hi[open_[~out]] = mid[~out]
    # per grid and column j, #{l: lo_l > j}: its users less those with lo_l <= j
    hist = np.bincount(grid * (C + 1) + lo, minlength=G * (C + 1)).reshape(G, C + 1)
    users = np.bincount(grid, minlength=G)
    out_: np.ndarray = (users[:, None] - np.cumsum(hist, axis=1)[:, :C]).astype(np.int64)
    return out_


def width_penalties(
    R: np.ndarray, L: int | np.ndarray, n: int | np.ndarray, e3: float, U: float
) -> np.ndarray:
    """``round(2 R_j L/(n ε₃ δ))``, ``δ = U·WIDTH_STEP``: the Laplace scale at ``R_j`` in units of
    one average user clipped by ``δ`` per record (public); one row per grid when ``L`` and
    ``n`` are columns."""
    return np.round(2.0 * R * L / (n * e3 * WIDTH_STEP * U)).astype(np.int64)


def centred_spread(
    info: CountsInfo, U: float, lo: np.ndarray, hi: np.ndarray, clipped_at_most: int
) -> BiasSpread:
    """Bounds on ``μ - θ`` when at most ``A`` users are clipped (docs/math.md §5.8): a user
    clipped from above adds at most ``(U m_l - hi_l)/n``, from below at most ``lo_l/n``; the
    records the caps drop move the mean by at most ``U d/N``."""
    wg = WindowGrids.one(info)
    a = np.array([max(0, int(clipped_at_most))])
    below, above = centred_spreads(wg, U, lo, hi, a, wg.by_size())
    return BiasSpread(float(below[0]), float(above[0]), SPREAD_BETA)


def centred_spreads(
    wg: WindowGrids,
    U: float,
    lo: np.ndarray,
    hi: np.ndarray,
    a: np.ndarray,
    groups: dict[int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`centred_spread` of every grid of ``wg`` (``lo``, ``hi`` per active user, at
    most ``a[g]`` users clipped in grid ``g``)."""
    n = (wg.n - wg.dropped).astype(np.float64)
    drop = U * wg.dropped.astype(np.float64) / wg.n
    below = top_sums(wg, lo, a, groups) / n
    above = top_sums(wg, U * wg.m.astype(np.float64) - hi, a, groups) / n
    return below + drop, above + drop


@dataclass(frozen=True)
class CentredDone:
    """Per grid: the centre and half-width drawn, the noiseless estimate, its sensitivity
    and the bounds of its spread."""

    centre: np.ndarray
    half_width: np.ndarray
    value: np.ndarray
    sensitivity: np.ndarray
    below: np.ndarray
    above: np.ndarray


def user_sums(x: np.ndarray, first: np.ndarray, wg: WindowGrids, U: float) -> np.ndarray:
    """Each active user's sum over its kept records ``x[first[l]:]``, from its own values
    only (``np.add.reduceat``), clamped into ``[0, U m_l]`` (post-processing)."""
    out: np.ndarray = np.clip(np.add.reduceat(x, first), 0.0, U * wg.m.astype(np.float64))
    return out


def _half_width_rows(
    wg: WindowGrids, U: float, width_factor: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per grid its :func:`half_widths` (rows padded with ``inf``) and how many it has."""
    values, which = np.unique(wg.m_max, return_inverse=True)
    made = [half_widths(U, int(m), width_factor) for m in values.tolist()]
    sizes = np.array([r.size for r in made], dtype=np.int64)
    table = np.full((values.size, int(sizes.max())), np.inf)
    for i, r in enumerate(made):
        table[i, : r.size] = r
    which = which.reshape(-1)
    return table[which], sizes[which]


def centred_clip_rows(
    noise: NoiseSource,
    wg: WindowGrids,
    sums: np.ndarray,
    U: float,
    shares: tuple[float, float, float],
    width_factor: float,
) -> CentredDone:
    """The adaptive path (module docstring) on every grid of ``wg``, each past its gate:
    ``sums`` from :func:`user_sums`, ``shares`` ``(ε₁, ε₂, ε₃)``. Each choice is one
    noisy-max invocation per grid (:func:`noisy_max_rows`; one grid: a batch of one)."""
    e1, e2, e3 = shares
    G = wg.L.size
    m = wg.m.astype(np.float64)
    kept = wg.n - wg.dropped
    cands = centre_candidates(U)
    (jc,) = noisy_max_rows(noise, [(centre_scores(sums / m, wg.grid, wg.L, cands), e1)])
    c = cands[jc]
    R_all, sizes = _half_width_rows(wg, U, width_factor)
    clipped = grid_clipped(sums, m, wg.grid, c, R_all, U)
    j = np.zeros(G, dtype=np.int64)
    a = np.zeros(G, dtype=np.int64)
    for size in np.unique(sizes).tolist():
        at = np.flatnonzero(sizes == size)
        pen = width_penalties(R_all[at, :size], wg.L[at, None], kept[at, None], e3, U)
        (j[at],) = noisy_max_rows(noise, [(-clipped[at, :size] - pen, 2.0 * e2)])
        a[at] = np.minimum(wg.L[at], clipped_bound(pen, j[at], e2))
    R = R_all[np.arange(G), j]
    lo, hi = centred_window(m, U, c[wg.grid], R[wg.grid])
    n = kept.astype(np.float64)
    value = np.minimum(np.maximum(grid_fsums(np.clip(sums, lo, hi), wg.start) / n, 0.0), U)
    sens = float_sum_sensitivities(np.maximum.reduceat(hi - lo, wg.start[:-1]) / n, U)
    below, above = centred_spreads(wg, U, lo, hi, a, wg.by_size())
    return CentredDone(c, R, value, sens, below, above)


def centred_shares(
    eps: float, centre_share: float, width_share: float
) -> tuple[float, float, float]:
    """``(ε₁, ε₂, ε₃)`` of :func:`split_shares` (their exact sum at most ``ε``)."""
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
    e1, e2, e3 = centred_shares(eps, centre_share, width_share)
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
    details = {
        **base,
        "path": "adaptive",
        "eps_centre": e1,
        "eps_width": e2,
        "eps_noise": e3,
    }

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        # the array rule on a batch of one
        wg = WindowGrids.one(info)
        x = grid.values[grid.record_rank < info.eff[grid.record_user]]  # kept, user by user
        first = np.zeros(wg.m.size, dtype=np.int64)
        np.cumsum(wg.m[:-1], out=first[1:])
        sums = user_sums(x, first, wg, U)
        done = centred_clip_rows(noise, wg, sums, U, (e1, e2, e3), width_factor)
        c, R = float(done.centre[0]), float(done.half_width[0])
        spread = BiasSpread(float(done.below[0]), float(done.above[0]), SPREAD_BETA)
        extra: dict[str, object] = {"centre": c, "half_width": R}
        return Estimate(float(done.value[0]), float(done.sensitivity[0]), extra, spread)

    kept = info.eff.copy()
    return Draft("mean", NAME, eps, e3, None, None, kept, details, estimator)
