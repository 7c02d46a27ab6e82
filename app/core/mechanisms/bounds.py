"""Closed-form sensitivities, worst-case biases and worst-case errors for one grid.

Every function here is a scalar formula of public quantities only (counts and the
value bound ``U``); none looks at a value. References are to the seed papers
(``002`` optimal array averaging, ``004`` variance and composition) as numbered in
``docs/math.md`` §1.5; the formulas are docs/math.md §2–§4.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from app.core.data.checks import check_bound, check_epsilon

__all__ = [
    "grouped_linear_mean_bias",
    "joint_clip_error",
    "joint_clip_errors",
    "linear_mean_bias",
    "mean_clip_bias",
    "mean_sensitivity",
    "optimal_split",
    "split_epsilon",
    "sum_exceeds",
    "variance_clip_bias",
    "variance_clip_biases",
    "variance_sensitivities",
    "variance_sensitivity",
]

SPLITS = ("half", "optimal")


def _check_counts(max_count: int, total: int) -> None:
    if total <= 0:
        raise ValueError("a grid needs at least one record")
    if not 0 < max_count <= total:
        raise ValueError(f"need 0 < max count <= total, got {max_count} and {total}")


def mean_sensitivity(U: float, max_count: int, total: int) -> float:
    """User-level sensitivity of the mean, ``U m* / n`` (002 eq. 2, 004 eq. 5).

    With kept counts ``Γ`` in place of ``m`` it is ``Δμ_clip = U Γ* / ΣΓ`` (004 eq. 9).
    """
    _check_counts(max_count, total)
    return U * max_count / total


def variance_sensitivity(U: float, max_count: int, total: int) -> float:
    """User-level sensitivity of the population variance (004 Prop III.1; with kept counts
    004 Lemma III.3): :func:`variance_sensitivities` of one grid."""
    _check_counts(max_count, total)
    return float(variance_sensitivities(U, max_count, total))


def _check_kept(kept_total: int, total: int) -> None:
    if total <= 0:
        raise ValueError("a grid needs at least one record")
    if not 0 <= kept_total <= total:
        raise ValueError(f"need 0 <= kept <= total, got {kept_total} and {total}")


def mean_clip_bias(U: float, kept_total: int, total: int) -> float:
    """Worst-case bias of the clipped mean, ``U (1 - s/n)`` (004 Thm IV.1, 002 Lemma V.1)."""
    _check_kept(kept_total, total)
    return U * (1.0 - kept_total / total)


def variance_clip_bias(U: float, kept_total: int, total: int) -> float:
    """Worst-case bias of the clipped population variance (004 Thm IV.2, corrected as in
    docs/math.md §3.2): :func:`variance_clip_biases` of one grid."""
    _check_kept(kept_total, total)
    return float(variance_clip_biases(U, kept_total, total))


def linear_mean_bias(U: float, weights: npt.ArrayLike) -> float:
    """Worst-case bias ``(U/2) Σ_j |w_j - 1/n|`` of a linear mean estimator (docs/math.md §3.3).

    ``weights`` are the non-negative weights the estimator puts on each of the
    ``n`` records (summing to 1). A linear function on the box ``[0, U]^n``
    peaks at a corner, which gives this bound exactly.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 1 or w.size == 0:
        raise ValueError("weights must be a non-empty 1-d array")
    if np.any(w < 0) or not math.isclose(float(w.sum()), 1.0, rel_tol=1e-9, abs_tol=1e-12):
        raise ValueError("weights must be non-negative and sum to 1")
    return float(U / 2.0 * np.abs(w - 1.0 / w.size).sum())


def sum_exceeds(a: npt.ArrayLike, b: npt.ArrayLike, total: float) -> np.ndarray:
    """Whether the *exact* (real) sum ``a + b`` of floats exceeds ``total``, element-wise.

    Knuth's TwoSum gives ``a + b = s + err`` exactly with ``s = fl(a + b)``; the real sum
    exceeds ``total`` iff ``s > total``, or ``s == total`` and ``err > 0``. (Testing
    ``fl(a + b) <= total`` alone would let a real sum one rounding above ``total`` pass.)
    """
    if isinstance(a, float) and isinstance(b, float):  # the scalar hot path, same arithmetic
        t = a + b
        tb = t - a
        e = (a - (t - tb)) + (b - tb)
        return np.bool_(t > total or (t == total and e > 0))
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    out: np.ndarray = (s > total) | ((s == total) & (err > 0))
    return out


def optimal_split(a: float, b: float, eps: float) -> tuple[float, float]:
    """Split ``eps = eps1 + eps2`` minimising ``a/eps1 + b/eps2`` (docs/math.md §4.3).

    ``eps1 = eps √a / (√a + √b)``; it is never worse than ``eps/2`` each. In floats
    ``eps - eps1`` can round up, so that ``eps1 + eps2`` exceeds ``eps``; ``eps2`` is then
    stepped down one float at a time until the exact sum is at most ``eps``
    (:func:`sum_exceeds`; a few ulps at most are lost). ``eps1 <= eps`` always (a
    rounded product by a factor <= 1), so the loop ends.
    """
    eps = check_epsilon(eps)
    if a < 0 or b < 0:
        raise ValueError("sensitivities must be non-negative")
    if a == 0 and b == 0:
        return eps / 2.0, eps / 2.0
    ra, rb = math.sqrt(a), math.sqrt(b)
    eps1 = eps * ra / (ra + rb)
    eps2 = eps - eps1
    while eps2 > 0.0 and sum_exceeds(eps1, eps2, eps):
        eps2 = math.nextafter(eps2, 0.0)
    return eps1, eps2


def split_epsilon(d_mu: float, d_var: float, eps: float, split: str) -> tuple[float, float]:
    """The mean's and the variance's shares of a joint release's ``eps`` (docs/math.md §4.3):
    ``eps/2`` each (``"half"``, 004 §III) or :func:`optimal_split` (``"optimal"``)."""
    if split == "half":
        return eps / 2.0, eps / 2.0
    if split == "optimal":
        return optimal_split(d_mu, d_var, eps)
    raise ValueError(f"unknown split {split!r}; use 'half' or 'optimal'")


def joint_clip_error(
    U: float, eps: float, max_kept: int, kept_total: int, total: int, *, split: str = "half"
) -> float:
    """Worst-case error ``E_g`` of the joint clipped mean+variance release (004 eq. 13,
    docs/math.md §4.2): :func:`joint_clip_errors` of one grid, its counts checked."""
    _check_counts(max_kept, kept_total)
    _check_kept(kept_total, total)
    return float(joint_clip_errors(U, eps, max_kept, kept_total, total, split=split)[()])


def joint_clip_errors(
    U: float,
    eps: float,
    max_kept: npt.ArrayLike,
    kept_total: npt.ArrayLike,
    total: npt.ArrayLike,
    *,
    split: str = "half",
) -> np.ndarray:
    """``E_g = B_μ + B_Var + Δμ/ε₁ + ΔVar/ε₂`` per grid (004 eq. 13, docs/math.md §4.2), over
    integer arrays ``1 <= max_kept <= kept_total <= total`` (below 2³¹, so ``n²`` is exact in
    int64); ``ε₁ = ε₂ = ε/2`` or the optimal split (§4.3). A statistic with zero
    sensitivity gets no noise (its term is 0, not 0/0)."""
    U = check_bound(U)
    eps = check_epsilon(eps)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use 'half' or 'optimal'")
    mx = np.asarray(max_kept, dtype=np.int64)
    s = np.asarray(kept_total, dtype=np.int64)
    n = np.asarray(total, dtype=np.int64)
    UU = U * U
    quarter = UU / 4.0
    d_mu = U * mx / s
    s2 = s * s
    d_var = np.where(
        s > 2 * mx,
        UU * mx * (s - mx) / s2,
        np.where(s % 2 == 0, quarter, quarter * (1.0 - 1.0 / s2)),
    )
    n2 = n * n
    var_bias = np.where(
        s == n,
        0.0,
        np.where(
            n <= 2 * s,
            UU * s * (n - s) / n2,
            np.where(n % 2 == 0, quarter, quarter * (1.0 - 1.0 / n2)),
        ),
    )
    bias = U * (1.0 - s / n) + var_bias
    if split == "half":
        eps1 = eps2 = eps / 2.0
        out: np.ndarray = bias + (d_mu / eps1 + d_var / eps2)
        return out
    ra, rb = np.sqrt(d_mu), np.sqrt(d_var)
    both_zero = (d_mu == 0) & (d_var == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        e1 = np.where(both_zero, eps / 2.0, eps * ra / (ra + rb))
        e2 = np.where(both_zero, eps / 2.0, eps - e1)
        over = (e2 > 0.0) & sum_exceeds(e1, e2, eps)
        while over.any():  # as optimal_split: never above eps
            e2 = np.where(over, np.nextafter(e2, 0.0), e2)
            over = (e2 > 0.0) & sum_exceeds(e1, e2, eps)
        noise = np.where(d_mu > 0, d_mu / e1, 0.0) + np.where(d_var > 0, d_var / e2, 0.0)
    out = bias + noise
    return out


def grouped_linear_mean_bias(
    U: float, counts: npt.ArrayLike, kept: npt.ArrayLike, weights: npt.ArrayLike
) -> float:
    """``(U/2) Σ_j |w_j - 1/n|`` (docs/math.md §3.3) for weights that are constant per user.

    User ``l`` has ``counts[l]`` records; its earliest ``kept[l]`` get weight
    ``weights[l]`` each and the rest weight 0. The weights must sum to 1 over the
    ``n = Σ counts`` records. Same value as :func:`linear_mean_bias` on the expanded
    weight vector, in O(users) instead of O(records).
    """
    m = np.asarray(counts, dtype=float)
    k = np.asarray(kept, dtype=float)
    w = np.asarray(weights, dtype=float)
    n = float(m.sum())
    if n <= 0:
        raise ValueError("a grid needs at least one record")
    if np.any(k < 0) or np.any(k > m) or np.any(w < 0):
        raise ValueError("need 0 <= kept <= counts and non-negative weights")
    total = float((k * w).sum())
    if not math.isclose(total, 1.0, rel_tol=1e-9, abs_tol=1e-12):
        raise ValueError(f"weights must sum to 1, got {total!r}")
    return float(U / 2.0 * ((k * np.abs(w - 1.0 / n)).sum() + (m - k).sum() / n))


def variance_sensitivities(U: float, max_count: npt.ArrayLike, total: npt.ArrayLike) -> np.ndarray:
    """``U² m*(n - m*)/n²`` when ``n > 2m*``, else ``U²/4`` (n even) or ``(U²/4)(1 - 1/n²)``
    (004 Prop III.1 / Lemma III.3), elementwise."""
    m = np.asarray(max_count, dtype=float)
    n = np.asarray(total, dtype=float)
    if np.any(n <= 0) or np.any(m <= 0) or np.any(m > n):
        raise ValueError("need 0 < max count <= total")
    first = U * U * m * (n - m) / (n * n)
    even = np.full_like(n, U * U / 4.0)
    odd = U * U / 4.0 * (1.0 - 1.0 / (n * n))
    return np.where(n > 2 * m, first, np.where(n % 2 == 0, even, odd))


def variance_clip_biases(U: float, kept_total: npt.ArrayLike, total: npt.ArrayLike) -> np.ndarray:
    """0 when ``s = n``, ``U² s(n - s)/n²`` when ``n <= 2s``, else ``U²/4`` (n even) or
    ``(U²/4)(1 - 1/n²)`` (004 Thm IV.2 with its regimes put right, docs/math.md §3.2)."""
    s = np.asarray(kept_total, dtype=float)
    n = np.asarray(total, dtype=float)
    if np.any(n <= 0) or np.any(s < 0) or np.any(s > n):
        raise ValueError("need 0 <= kept <= total")
    low = U * U * s * (n - s) / (n * n)
    even = np.full_like(n, U * U / 4.0)
    odd = U * U / 4.0 * (1.0 - 1.0 / (n * n))
    out = np.where(n <= 2 * s, low, np.where(n % 2 == 0, even, odd))
    return np.where(s == n, 0.0, out)
