"""Clip-User's hot-loop error: 004 eq. 13 for one grid in plain scalar arithmetic
(docs/math.md §4.2).

The greedy evaluates ``E_g`` for millions of trial removals; :func:`joint_parts` and
:func:`half_error` are :func:`app.core.mechanisms.bounds.joint_clip_errors` with exactly
its float operations in the same order, without the array overhead. They run as plain
Python in the readable greedy (:mod:`app.core.planning.clip_user_greedy`) and compiled,
the same source, inside the numba kernel (:mod:`app.core.planning.clip_user_kernel`):
the scalar and array forms agree bit for bit (``tests/unit/core/test_clip_user.py``),
the compiled stages take the Python loop's decisions (``test_clip_user_kernel.py``).
Eq. 13 is thus written twice, here (scalars, for the loops) and in ``bounds`` (arrays),
for speed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from numba.extending import register_jitable

from app.core.mechanisms.bounds import SPLITS, sum_exceeds

__all__ = ["check_split", "half_error", "joint_parts", "scalar_error_fn"]


def check_split(split: str) -> None:
    """``ValueError`` unless ``split`` is ``"half"`` or ``"optimal"`` (docs/math.md §4.3)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use 'half' or 'optimal'")


@register_jitable
def joint_parts(U: float, mx: int, s: int, n: int) -> tuple[float, float, float]:
    """``(B_μ + B_Var, Δμ, ΔVar)`` of a grid keeping ``s`` of its ``n`` records, at most
    ``mx`` per user (integers below 2³¹, so ``s²`` and ``n²`` are exact in int64)."""
    UU = U * U
    quarter = UU / 4.0
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


@register_jitable
def half_error(U: float, eps: float, mx: int, s: int, n: int) -> float:
    """``E_g`` at ``ε₁ = ε₂ = ε/2`` (0/ε is 0 when ``ΔVar = 0``)."""
    bias, d_mu, d_var = joint_parts(U, mx, s, n)
    half_eps = eps / 2.0
    return bias + (d_mu / half_eps + d_var / half_eps)


def scalar_error_fn(U: float, eps: float, split: str) -> Callable[[int, int, int], float]:
    """Return ``err(max_kept, kept_total, total)`` equal bit for bit to
    :func:`app.core.mechanisms.bounds.joint_clip_error` (004 eq. 13), without its checks."""
    if split == "half":
        return partial(half_error, U, eps)
    half_eps = eps / 2.0

    def err_opt(mx: int, s: int, n: int) -> float:
        bias, d_mu, d_var = joint_parts(U, mx, s, n)
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
