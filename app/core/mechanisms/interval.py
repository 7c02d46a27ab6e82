"""Private intervals for the projection mechanisms: 002 Alg. 3 and a discrete private quantile.

Both act on the array means ``Ā_1..Ā_K̄`` of BESTFIT pseudo-users; one user moves
at most one array mean, so every integer score below moves by at most 1 between
neighbouring datasets. Each choice is :meth:`NoiseSource.noisy_max` at the budget
it is given (docs/math.md §9.4.1): exactly that budget is spent, and
the privacy holds in floating point because OpenDP's sampler is exact and the
scores are integers computed from the data by counting.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from app.core.data.grid import GridData
from app.core.noise.laplace import NoiseSource

__all__ = [
    "QUANTILE_STEPS",
    "interval_costs",
    "isolated_head_moments",
    "isolated_head_sums",
    "private_interval",
    "private_quantile",
    "quantile_candidates",
    "quantile_scores",
]

#: The private quantile chooses among the public points ``jU/QUANTILE_STEPS``.
QUANTILE_STEPS = 128


def isolated_head_sums(grid: GridData, kept: npt.ArrayLike) -> np.ndarray:
    """Per user, the sum of its earliest ``kept[l]`` values, computed from that user's values
    alone (0 where kept is 0).

    ``GridData.head_sums`` differences prefix sums over the whole grid, so a user's
    result carries rounding from everyone's values: one user's change could then move
    *another* user's mean across a candidate and a count by 2. The private choices'
    integer scores must move by at most 1, so they read these sums instead, each a
    function of one user's values only (``np.add.reduceat`` over that user's head).
    """
    return isolated_head_moments(grid, kept, 0.0)[0]


def isolated_head_moments(
    grid: GridData, kept: npt.ArrayLike, centre: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per user, ``Σ (x - c)`` and ``Σ (x - c)²`` over its earliest ``kept[l]`` records, each
    from that user's values only: users kept whole read the grid's cached per-user sums
    (:meth:`GridData.user_moments`), the others sum their own heads."""
    k = np.asarray(kept, dtype=np.int64)
    full1, full2 = grid.user_moments(float(centre))
    whole = k == grid.counts
    s1 = np.where(whole, full1, 0.0)
    s2 = np.where(whole, full2, 0.0)
    part = np.flatnonzero(~whole & (k > 0))
    if part.size:
        lens = k[part]
        starts = grid.offsets[:-1][part]
        first = np.concatenate(([0], np.cumsum(lens)[:-1]))
        idx = np.repeat(starts - first, lens) + np.arange(int(lens.sum()))
        d = grid.values[idx] - centre
        s1[part] = np.add.reduceat(d, first)
        s2[part] = np.add.reduceat(d * d, first)
    return s1, s2


def interval_costs(means: npt.ArrayLike, U: float, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints ``T`` of the ``ceil(U/τ)`` bins of width ``τ`` and the cost ``c(x)`` of each.

    002 Alg. 3 lines 2–4: each mean is snapped to its nearest midpoint (the midpoint
    of the bin holding it) and ``c(x) = max(#{μ_i < x}, #{μ_i > x})`` (integers).
    """
    m = np.asarray(means, dtype=np.float64)
    n_bins = max(1, math.ceil(U / tau))
    mids = (np.arange(n_bins) + 0.5) * tau
    bins = np.clip(np.floor(m / tau).astype(np.int64), 0, n_bins - 1)
    counts = np.bincount(bins, minlength=n_bins)
    upto = np.cumsum(counts)
    below = upto - counts
    above = m.size - upto
    return mids, np.maximum(below, above)


def private_interval(
    means: npt.ArrayLike, U: float, tau: float, eps: float, noise: NoiseSource
) -> tuple[float, float, float]:
    """002 Alg. 3 (Levy et al. Alg. 6): a private "high-probability" interval ``[a, b]``.

    Chooses a midpoint ``x`` by report-noisy-max on the integer scores ``-c(x)`` at
    budget ``eps`` and returns ``(a, b, x)`` with ``a = max(0, x - 3τ/2)`` and
    ``b = min(U, x + 3τ/2)``. One user moves one array mean, which moves each count
    in ``c`` and so ``c`` itself by at most 1: the choice is exactly ``eps``-DP
    (the weights of the equivalent exponential mechanism are ``exp(-eps·c/2)``;
    levy gives this step ``ε/2``, which is Alg. 3's ``exp(-ε c/4)`` with ``ε``
    levy's whole budget).
    """
    mids, cost = interval_costs(means, U, tau)
    idx = noise.noisy_max(-cost, eps)
    x = float(mids[idx])
    return max(0.0, x - 1.5 * tau), min(U, x + 1.5 * tau), x


def quantile_candidates(U: float) -> np.ndarray:
    """The public candidates ``jU/QUANTILE_STEPS``, ``j = 0..QUANTILE_STEPS``."""
    return np.arange(QUANTILE_STEPS + 1, dtype=np.float64) * (U / QUANTILE_STEPS)


def quantile_scores(values: npt.ArrayLike, q: float, cands: np.ndarray) -> np.ndarray:
    """Integer scores ``-max(0, #{v < x} - ⌊qk⌋, ⌈qk⌉ - #{v <= x})`` of the candidates.

    ``k`` values; a candidate scores 0 when its rank interval ``[#{v < x}, #{v <= x}]``
    reaches the target rank ``qk`` and loses one per rank it misses by. Changing one
    value moves each count by at most 1, so each score by at most 1.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile level must lie in [0, 1], got {q}")
    v = np.sort(np.asarray(values, dtype=np.float64))
    t_lo, t_hi = math.floor(q * v.size), math.ceil(q * v.size)
    below = np.searchsorted(v, cands, side="left")
    upto = np.searchsorted(v, cands, side="right")
    return -np.maximum(0, np.maximum(below - t_lo, t_hi - upto)).astype(np.int64)


def private_quantile(
    values: npt.ArrayLike, q: float, U: float, eps: float, noise: NoiseSource
) -> float:
    """An ``eps``-DP ``q``-quantile of ``values`` on the public grid :func:`quantile_candidates`.

    The exponential mechanism over a finite public candidate set (McSherry and
    Talwar 2007) with the rank score of :func:`quantile_scores`, drawn by
    report-noisy-max (exact): it replaces Smith's continuous quantile (002 §III-E,
    ref. [16]), whose gap-width weights would need an exact sampler over real
    intervals. Values outside ``[0, U]`` only count as below or above every candidate.
    """
    cands = quantile_candidates(U)
    return float(cands[noise.noisy_max(quantile_scores(values, q, cands), eps)])
