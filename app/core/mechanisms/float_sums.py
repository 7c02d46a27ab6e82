"""Sums whose floating-point result moves by no more than the declared sensitivity allows.

An estimate is a sum of per-user terms, each from one user's values in a public range,
summed with :func:`math.fsum`; the Laplace step is calibrated on a sensitivity grown by what
the two roundings can add (docs/math.md §9.5).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

__all__ = [
    "UNIT_ROUNDOFF",
    "exact_sum",
    "float_sum_sensitivities",
    "float_sum_sensitivity",
    "float_variance_sensitivities",
    "float_variance_sensitivity",
    "split_shares",
]

#: ``u = 2^-53``: a rounded product or quotient is within a factor ``1 ± u`` of the real one.
UNIT_ROUNDOFF = 2.0**-53


def exact_sum(terms: np.ndarray) -> float:
    """The float nearest the exact sum of ``terms`` (``math.fsum``; error ≤ half an ulp)."""
    return math.fsum(np.asarray(terms, dtype=np.float64).tolist())


def _up(x: float) -> float:
    return math.nextafter(x, math.inf)


def float_sum_sensitivity(sensitivity: float, value_bound: float, term_roundings: int = 2) -> float:
    """:func:`float_sum_sensitivities` of one estimate."""
    return float(
        float_sum_sensitivities(np.float64(sensitivity), np.float64(value_bound), term_roundings)
    )


def split_shares(eps: float, shares: tuple[float, ...]) -> tuple[float, ...]:
    """``(s_1 ε, …, s_k ε, rest)`` whose **exact** (rational) sum is at most ``ε``.

    Each private step of a mechanism gets ``s_i ε``; the Laplace step gets the rest,
    stepped down one float at a time while the exact sum of the parts exceeds ``ε``
    (a float test ``a + b > ε`` can round a real excess away). Sequential composition
    then charges at most ``ε`` (docs/math.md §9.3). Pure, so cached: the grids of a slot
    release share their ``ε`` and shares (a Fraction sum per call was ~40 µs per grid).
    """
    return _split_shares(float(eps), tuple(float(s) for s in shares))


@functools.lru_cache(maxsize=4096)
def _split_shares(eps: float, shares: tuple[float, ...]) -> tuple[float, ...]:
    if not all(0.0 < s < 1.0 for s in shares) or sum(Fraction(s) for s in shares) >= 1:
        raise ValueError(f"budget shares must lie in (0, 1) and sum to below 1, got {shares}")
    parts = [s * eps for s in shares]
    rest = eps - math.fsum(parts)
    exact_eps = Fraction(eps)
    fixed = sum((Fraction(p) for p in parts), Fraction(0))
    while rest > 0.0 and fixed + Fraction(rest) > exact_eps:
        rest = math.nextafter(rest, 0.0)
    if not rest > 0.0:
        raise ValueError(f"epsilon {eps!r} is too small to split into {shares}")
    return (*parts, rest)


def float_variance_sensitivity(sensitivity: float, value_bound: float, per_user: int) -> float:
    """:func:`float_variance_sensitivities` of one estimate."""
    k = np.int64(per_user)
    return float(float_variance_sensitivities(np.float64(sensitivity), np.float64(value_bound), k))


def float_sum_sensitivities(
    sensitivities: npt.ArrayLike, value_bounds: npt.ArrayLike, term_roundings: int = 2
) -> np.ndarray:
    """Sensitivities that hold for the *floats* of :func:`exact_sum` estimates
    (docs/math.md §9.5): each user's float term carries at most ``term_roundings``
    roundings, the sum one more per neighbour, so this is at least
    ``Δ(1 + u)^(r+2) + 2·ulp(2·value_bound)``, every operation rounded upwards."""
    sens = np.asarray(sensitivities, dtype=np.float64)
    bound = np.asarray(value_bounds, dtype=np.float64)
    if not (np.all(np.isfinite(sens)) and np.all(sens >= 0) and np.all(bound >= 0)):
        raise ValueError("invalid sensitivities or bounds")
    if term_roundings < 0:
        raise ValueError(f"term_roundings must be >= 0, got {term_roundings}")
    r = term_roundings + 2
    factor = _up(1.0 + 2.0 * r * UNIT_ROUNDOFF) if r * UNIT_ROUNDOFF <= 0.5 else math.inf
    grown = np.nextafter(sens * factor, math.inf)
    out: np.ndarray = np.nextafter(
        grown + 2.0 * np.spacing(2.0 * np.maximum(bound, sens)), math.inf
    )
    return out


def float_variance_sensitivities(
    sensitivities: npt.ArrayLike, value_bounds: npt.ArrayLike, per_user: npt.ArrayLike
) -> np.ndarray:
    """Sensitivities that hold for the floats of population variances from per-user sums
    of at most ``per_user`` records on ``[0, U]`` (docs/math.md §9.5): at least
    ``Δ(1 + 4u) + (2k* + 32)uU²``, every operation rounded upwards."""
    sens = np.asarray(sensitivities, dtype=np.float64)
    bound = np.asarray(value_bounds, dtype=np.float64)
    k = np.asarray(per_user)
    if not (np.all(np.isfinite(sens)) and np.all(sens >= 0) and np.all(bound >= 0)):
        raise ValueError("invalid sensitivities or bounds")
    if k.dtype.kind not in "iu" or np.any(k < 0):
        raise ValueError("per_user must be integers >= 0")
    up = math.inf
    grown = np.nextafter(sens * _up(1.0 + 4.0 * UNIT_ROUNDOFF), up)
    rate = np.nextafter((2.0 * k.astype(np.float64) + 32.0) * UNIT_ROUNDOFF, up)
    slack = np.nextafter(rate * np.nextafter(bound * bound, up), up)
    out: np.ndarray = np.nextafter(grown + slack, up)
    return out
