"""d-dimensional worst-case-optimal bounding (003 Thm III.1 for general d).

Records are points of ``Δ_U = {x ∈ R^d : x >= 0, ||x||_1 <= U}`` (003 §II-A/B).
User ``l``'s records are l1-projected onto the annulus
``A_l = {x ∈ Δ_U : a_l <= ||x||_1 <= b_l}`` with the intervals of the 1-d case and
``T`` the ``ceil(2d/ε)``-th largest of ``{U m_l}``; the mean of the projected
records gets ``Lap(b)`` on each coordinate.

Sensitivity (l1). For ``d = 1`` the annulus is ``[a_l, b_l]`` and a user moves the
sum by at most ``m_l (b_l - a_l) <= T``: ``Δ = T/n`` as in 003 Lemma III.3. For
``d >= 2`` two points of ``A_l`` can be ``2 b_l`` apart in l1 (``b e_1`` and
``b e_2``), so a user moves the sum by up to ``min(U m_l + T, 2 U m_l)``; 003
Lemma III.3's ``T/n`` is too small there (its proof changes ``(a, 0, …)`` to
``(b, 0, …)`` only). This module calibrates to the true value
``Δ = max_l min(U m_l + T, 2 U m_l)/n`` so the release stays ``ε``-DP; the bias is
003 Lemma III.2's ``Σ_l max((U m_l - T)/2, 0)/n`` and the l1 worst-case error is
``bias + d·b``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core.data.checks import check_bound, check_epsilon
from app.core.data.results import VectorRelease, ci95
from app.core.mechanisms.mean_projection import wco_intervals, wco_threshold
from app.core.noise.laplace import NoiseSource, calibrate_scale, default_noise

__all__ = ["project_annulus", "worst_case_optimal_d"]


def project_annulus(points: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """An l1 projection of nonnegative rows onto ``{a <= ||x||_1 <= b}`` (003 Lemma III.1).

    Rows above ``b`` are scaled down to norm ``b`` (each coordinate only decreases);
    rows below ``a`` get ``(a - ||x||_1)/d`` added to every coordinate (each only
    increases). Either way the l1 distance moved is ``| ||x||_1 - bound |``.
    """
    x = np.asarray(points, dtype=np.float64)
    norm = x.sum(axis=1)
    out = x.copy()
    over = norm > hi
    out[over] *= (hi[over] / norm[over])[:, None]
    under = norm < lo
    out[under] += ((lo[under] - norm[under]) / x.shape[1])[:, None]
    return out


def worst_case_optimal_d(
    values: npt.ArrayLike,
    offsets: npt.ArrayLike,
    U: float,
    eps: float,
    *,
    user_mean_fill: bool = True,
    noise: NoiseSource | None = None,
) -> VectorRelease:
    """Release the mean of d-dimensional records in ``Δ_U`` (003 Thm III.1; see module doc).

    ``values`` has shape ``(n, d)``, rows sorted by user then time; ``offsets`` (L+1)
    delimit each user's rows. With ``user_mean_fill`` each user's records are replaced
    by the user's mean point before projecting (003 §IV).
    """
    U = check_bound(U)
    eps = check_epsilon(eps)
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError("values must be a non-empty (n, d) array")
    off = np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size < 2 or off[0] != 0 or off[-1] != x.shape[0]:
        raise ValueError("offsets must run from 0 to n with one entry per user plus one")
    counts = np.diff(off)
    if np.any(counts < 0):
        raise ValueError("offsets must be non-decreasing")
    if not np.all(np.isfinite(x)) or np.any(x < 0) or np.any(x.sum(axis=1) > U):
        raise ValueError("every record must be finite, nonnegative, with l1 norm <= U")
    n, d = x.shape
    T = wco_threshold(counts, U, eps, d)
    lo, hi = wco_intervals(counts, U, T)
    users = np.repeat(np.arange(counts.size), counts)
    if user_mean_fill:
        sums = np.column_stack(
            [np.bincount(users, weights=x[:, j], minlength=counts.size) for j in range(d)]
        )
        active = counts > 0
        means = sums[active] / counts[active][:, None]
        projected = project_annulus(means, lo[active], hi[active])
        total = (projected * counts[active][:, None]).sum(axis=0)
    else:
        total = project_annulus(x, lo[users], hi[users]).sum(axis=0)
    estimate = total / n
    mf = counts.astype(np.float64)
    per_user = np.minimum(U * mf, T) if d == 1 else np.minimum(U * mf + T, 2.0 * U * mf)
    sens = float(per_user.max()) / n
    bias = float(np.maximum((U * mf - T) / 2.0, 0.0).sum()) / n
    scale = calibrate_scale(sens, eps)
    source = default_noise() if noise is None else noise
    noisy = np.array([source.laplace(float(v), scale) for v in estimate])
    # Only for d = 1 and T = 0 is the estimate (U/2) independent of every value.
    kept = np.zeros_like(counts) if sens == 0.0 else counts.copy()
    return VectorRelease(
        mechanism="worst_case_optimal",
        epsilon=eps,
        estimate=noisy,
        sensitivity=sens,
        noise_scale=scale,
        worst_case_bias=bias,
        worst_case_error=bias + d * scale,
        ci95=tuple(ci95(float(v), scale) for v in noisy),
        kept=kept,
        details={"T": T, "d": d, "user_mean_fill": user_mean_fill},
    )
