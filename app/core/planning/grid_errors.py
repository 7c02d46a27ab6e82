"""The joint worst-case error ``E_g`` of many grids at once (004 eq. 13, docs/math.md §4.2).

Clip-User (:mod:`app.core.planning.clip_user`) and the pseudo-user step
(:mod:`app.core.planning.pseudo_user`) evaluate :func:`app.core.mechanisms.bounds.joint_clip_error`
for millions of ``(largest kept count, kept total, record count)`` triples. This
module gives it twice, with exactly the float operations of ``bounds`` in the same
order, so every value agrees bit for bit (unit tests check both):

* :func:`scalar_error_fn`: a plain-Python closure without the argument checks,
  for the greedy loop's trial removals;
* :func:`grid_joint_errors`: vectorised over integer arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from app.core.data.checks import check_bound, check_epsilon
from app.core.mechanisms.bounds import sum_exceeds

__all__ = ["SPLITS", "check_split", "grid_joint_errors", "scalar_error_fn"]

SPLITS = ("half", "optimal")


def check_split(split: str) -> None:
    """``ValueError`` unless ``split`` is ``"half"`` or ``"optimal"`` (docs/math.md §4.3)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use 'half' or 'optimal'")


def scalar_error_fn(U: float, eps: float, split: str) -> Callable[[int, int, int], float]:
    """Return ``err(max_kept, kept_total, total)`` equal bit for bit to
    :func:`app.core.mechanisms.bounds.joint_clip_error` (004 eq. 13), without its checks.

    The hot loop of Clip-User evaluates it millions of times; the arithmetic is
    written in exactly the same order as in ``bounds`` so the floats agree (a unit
    test checks this on many inputs).
    """
    UU = U * U
    quarter = UU / 4.0
    half_eps = eps / 2.0

    def parts(mx: int, s: int, n: int) -> tuple[float, float, float]:
        d_mu = U * mx / s
        if s > 2 * mx:
            d_var = UU * mx * (s - mx) / (s * s)
        elif s % 2 == 0:
            d_var = quarter
        else:
            d_var = quarter * (1.0 - 1.0 / (s * s))
        if s == n:
            var_bias = 0.0
        elif n <= 2 * s:
            var_bias = UU * s * (n - s) / (n * n)
        elif n % 2 == 0:
            var_bias = quarter
        else:
            var_bias = quarter * (1.0 - 1.0 / (n * n))
        return U * (1.0 - s / n) + var_bias, d_mu, d_var

    if split == "half":

        def err(mx: int, s: int, n: int) -> float:
            bias, d_mu, d_var = parts(mx, s, n)
            return bias + (d_mu / half_eps + d_var / half_eps)  # 0/eps is 0 when d_var = 0

        return err

    def err_opt(mx: int, s: int, n: int) -> float:
        bias, d_mu, d_var = parts(mx, s, n)
        if d_mu == 0 and d_var == 0:
            eps1 = eps2 = half_eps
        else:
            ra, rb = math.sqrt(d_mu), math.sqrt(d_var)
            eps1 = eps * ra / (ra + rb)
            eps2 = eps - eps1
            while eps2 > 0.0 and sum_exceeds(eps1, eps2, eps):  # as bounds.optimal_split
                eps2 = math.nextafter(eps2, 0.0)
        # bounds.py: a statistic with zero sensitivity gets no noise (not 0/0).
        noise = (d_mu / eps1 if d_mu > 0 else 0.0) + (d_var / eps2 if d_var > 0 else 0.0)
        return bias + noise

    return err_opt


def grid_joint_errors(
    U: float,
    eps: float,
    max_kept: np.ndarray,
    kept_total: np.ndarray,
    total: np.ndarray,
    *,
    split: str = "half",
) -> np.ndarray:
    """Vectorised :func:`app.core.mechanisms.bounds.joint_clip_error` (004 eq. 13,
    docs/math.md §4.2).

    Element-wise over integer arrays (``1 <= max_kept <= kept_total <= total``);
    the float operations are those of ``bounds`` in the same order, so every entry
    equals the scalar function exactly (tested). Inputs are not validated beyond
    shape; counts must stay below 2**31 so ``n²`` fits in int64 exactly.
    """
    U = check_bound(U)
    eps = check_epsilon(eps)
    check_split(split)
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
        return bias + (d_mu / eps1 + d_var / eps2)  # 0/eps2 is 0 when d_var = 0
    ra, rb = np.sqrt(d_mu), np.sqrt(d_var)
    both_zero = (d_mu == 0) & (d_var == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        e1 = np.where(both_zero, eps / 2.0, eps * ra / (ra + rb))
        e2 = np.where(both_zero, eps / 2.0, eps - e1)
        over = (e2 > 0.0) & sum_exceeds(e1, e2, eps)
        while over.any():  # as bounds.optimal_split: never above eps
            e2 = np.where(over, np.nextafter(e2, 0.0), e2)
            over = (e2 > 0.0) & sum_exceeds(e1, e2, eps)
        # bounds.py: a statistic with zero sensitivity gets no noise (not 0/0).
        noise = np.where(d_mu > 0, d_mu / e1, 0.0) + np.where(d_var > 0, d_var / e2, 0.0)
    out: np.ndarray = bias + noise
    return out
