"""Private intervals for the projection mechanisms: 002 Alg. 3 and Smith's quantile.

Both act on the array means ``Ā_1..Ā_K̄`` of BESTFIT pseudo-users; one user moves
at most one array mean, which is what their privacy rests on.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from app.core.noise import NoiseSource

__all__ = ["interval_costs", "private_interval", "private_quantile", "quantile_log_weights"]


def interval_costs(means: npt.ArrayLike, U: float, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints ``T`` of the ``ceil(U/τ)`` bins of width ``τ`` and the cost ``c(x)`` of each.

    002 Alg. 3 lines 2–4: each mean is snapped to its nearest midpoint (the midpoint
    of the bin holding it) and ``c(x) = max(#{μ_i < x}, #{μ_i > x})``.
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

    Samples a midpoint ``x`` with probability ``∝ exp(-ε c(x) / 4)``, ``ε`` being the
    budget given to this step, and returns ``(a, b, x)`` with
    ``a = max(0, x - 3τ/2)`` and ``b = min(U, x + 3τ/2)``. One user changes one array
    mean and so ``c`` by at most 1: the draw is ``ε/2``-DP, within the ``ε`` it is
    charged.
    """
    mids, cost = interval_costs(means, U, tau)
    idx = noise.exponential_choice(-eps * cost.astype(np.float64) / 4.0)
    x = float(mids[idx])
    return max(0.0, x - 1.5 * tau), min(U, x + 1.5 * tau), x


def quantile_log_weights(
    values: npt.ArrayLike, q: float, U: float, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """End points ``z_0..z_{k+1}`` and log-weights of the ``k+1`` gaps in Smith's mechanism.

    ``z`` is the sorted values clipped to ``[0, U]`` with 0 and ``U`` added; gap ``i``
    has weight ``(z_{i+1} - z_i) exp(-ε |i - q k| / 2)`` (``-inf`` log-weight when empty).
    """
    v = np.sort(np.clip(np.asarray(values, dtype=np.float64), 0.0, U))
    z = np.concatenate(([0.0], v, [U]))
    widths = np.diff(z)
    ranks = np.arange(widths.size, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logw = np.log(widths) - eps * np.abs(ranks - q * v.size) / 2.0
    return z, logw


def private_quantile(
    values: npt.ArrayLike, q: float, U: float, eps: float, noise: NoiseSource
) -> float:
    """Smith's ``ε``-DP quantile (002 §III-E, ref. [16] Alg. 2; docs/math.md §5.4).

    Picks gap ``i`` with probability ``∝ (z_{i+1} - z_i) exp(-ε |i - q k| / 2)`` (in log
    space), then a uniform point inside it. The output density at ``y`` is
    ``∝ exp(-ε |rank(y) - q k| / 2)`` and one changed value moves every rank by at
    most 1, hence ``ε``-DP.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile level must lie in [0, 1], got {q}")
    z, logw = quantile_log_weights(values, q, U, eps)
    i = noise.exponential_choice(logw)
    return float(z[i] + noise.uniform() * (z[i + 1] - z[i]))
