"""Sums whose floating-point result moves by no more than the declared sensitivity allows.

An estimate is a sum of per-user terms, each from one user's values in a public range,
summed with :func:`math.fsum`; the Laplace step is calibrated on a sensitivity grown by what
the two roundings can add (docs/math.md §9.5).
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "UNIT_ROUNDOFF",
    "exact_sum",
    "float_sum_sensitivities",
    "float_sum_sensitivity",
    "float_variance_sensitivities",
    "float_variance_sensitivity",
    "grid_fsums",
    "split_shares",
]

#: ``u = 2^-53``: a rounded product or quotient is within a factor ``1 ± u`` of the real one.
UNIT_ROUNDOFF = 2.0**-53


def exact_sum(terms: np.ndarray) -> float:
    """The float nearest the exact sum of ``terms`` (``math.fsum``; error ≤ half an ulp)."""
    return math.fsum(np.asarray(terms, dtype=np.float64).tolist())


def grid_fsums(x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """:func:`exact_sum` of each grid's slice ``x[start[g]:start[g + 1]]`` (many grids'
    terms one after another): the float nearest each slice's exact sum."""
    values = np.asarray(x, dtype=np.float64).tolist()
    bounds = np.asarray(start).tolist()
    return np.array([math.fsum(values[a:b]) for a, b in itertools.pairwise(bounds)])


def _up(x: float) -> float:
    return math.nextafter(x, math.inf)


def float_sum_sensitivity(sensitivity: float, value_bound: float, term_roundings: int = 2) -> float:
    """:func:`float_sum_sensitivities` of one grid: the same rule on Python floats (an array
    of one costs ~10x more, and a slot release plans thousands of grids one by one)."""
    if not (0.0 <= sensitivity < math.inf and value_bound >= 0.0):
        raise ValueError(f"invalid sensitivity {sensitivity!r} or bound {value_bound!r}")
    return float(_sum_rule(sensitivity, value_bound, term_roundings, _up, math.ulp, max))


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
    """:func:`float_variance_sensitivities` of one grid, on Python floats (as above)."""
    if not (0.0 <= sensitivity < math.inf and value_bound >= 0.0):
        raise ValueError(f"invalid sensitivity {sensitivity!r} or bound {value_bound!r}")
    if per_user < 0:
        raise ValueError(f"per_user must be >= 0, got {per_user}")
    return float(_variance_rule(sensitivity, value_bound, per_user, _up))


def _check(sens: np.ndarray, bound: np.ndarray) -> None:
    """``ValueError`` unless every sensitivity is finite and >= 0 and every bound >= 0
    (NaN fails: a comparison with NaN is false)."""
    if not (
        sens.min(initial=0.0) >= 0.0 and sens.max(initial=0.0) < math.inf
        and bound.min(initial=0.0) >= 0.0
    ):  # fmt: skip
        raise ValueError(f"invalid sensitivities {sens!r} or bounds {bound!r}")


def float_sum_sensitivities(
    sensitivities: npt.ArrayLike, value_bounds: npt.ArrayLike, term_roundings: int = 2
) -> np.ndarray:
    """A sensitivity that holds for the *floats* of an :func:`exact_sum` estimate, per grid.

    ``sensitivities`` bounds, in real numbers, how far one user moves the exact sum of
    the terms. A user's float term is computed from its own values with at most
    ``term_roundings`` roundings of non-negative quantities (a user's own sum of ``k``
    records: ``k``; a product ``w_l·x``: one more), each a factor at most ``1 + u``, so
    its range grows by at most ``(1 + u)^r``; ``value_bounds`` bounds ``|estimate|``.
    Each of the two neighbouring results is the exact sum of the terms rounded once (at
    most half an ulp of ``2·value_bound``), so the floats differ by at most
    ``Δ(1 + u)^r + ulp(2·value_bound)``; this returns floats at least
    ``Δ(1 + u)^(r+2) + 2·ulp(2·value_bound)``, every operation rounded upwards
    (``np.nextafter``; ``np.spacing`` is the ulp of a value >= 0).
    """
    sens = np.asarray(sensitivities, dtype=np.float64)
    bound = np.asarray(value_bounds, dtype=np.float64)
    if sens.size == 1 == bound.size:  # one grid: the same rule on floats, ~10x faster
        one = float_sum_sensitivity(float(sens.flat[0]), float(bound.flat[0]), term_roundings)
        return np.full(sens.shape, one)
    _check(sens, bound)
    out: np.ndarray = _sum_rule(sens, bound, term_roundings, _up_all, np.spacing, np.maximum)
    return out


def _sum_rule(sens: Any, bound: Any, term_roundings: int, up: Any, ulp: Any, larger: Any) -> Any:
    """The rule of :func:`float_sum_sensitivities`, written once for floats and for arrays:
    ``up`` rounds up, ``ulp`` is the ulp of a value >= 0, ``larger`` the larger of two."""
    if term_roundings < 0:
        raise ValueError(f"term_roundings must be >= 0, got {term_roundings}")
    # (1 + u)^r <= 1 + 2ru while ru <= 1/2: one rounding-up product instead of r
    r = term_roundings + 2
    factor = _up(1.0 + 2.0 * r * UNIT_ROUNDOFF) if r * UNIT_ROUNDOFF <= 0.5 else math.inf
    return up(up(sens * factor) + 2.0 * ulp(2.0 * larger(bound, sens)))


def float_variance_sensitivities(
    sensitivities: npt.ArrayLike, value_bounds: npt.ArrayLike, per_user: npt.ArrayLike
) -> np.ndarray:
    """A sensitivity that holds for the floats of a population variance computed from
    per-user sums of ``d = x - U/2`` and ``d²`` (each a user's own sum of at most
    ``per_user`` records, then :func:`exact_sum` over users) on values in ``[0, U]``
    (docs/math.md §9.5), per grid.

    A user's sequential sum of ``k`` terms of size at most ``U²/4`` is off by at most
    ``(k - 1)u·kU²/4``; over all users and divided by ``s``, at most ``k* u U²/4`` for the
    second moment and ``k* u U/2`` for the first, whose square then moves by at most
    ``k* u U²/2``; squares, the two exact sums and the divisions add ``4uU²``. So each
    result is within ``(k*·3/4 + 4)uU²`` of the real variance, two neighbours' floats differ
    by at most ``Δ + (1.5k* + 8)uU²``; this returns at least ``Δ(1 + 4u) + (2k* + 32)uU²``.
    """
    sens = np.asarray(sensitivities, dtype=np.float64)
    bound = np.asarray(value_bounds, dtype=np.float64)
    k = np.asarray(per_user)
    if sens.size == 1 == bound.size == k.size and k.dtype.kind in "iu":  # one grid: floats
        one = float_variance_sensitivity(float(sens.flat[0]), float(bound.flat[0]), int(k.flat[0]))
        return np.full(sens.shape, one)
    _check(sens, bound)
    if k.dtype.kind not in "iu" or k.min(initial=0) < 0:
        raise ValueError(f"per_user must be integers >= 0, got {per_user!r}")
    out: np.ndarray = _variance_rule(sens, bound, k.astype(np.float64), _up_all)
    return out


def _variance_rule(sens: Any, bound: Any, per_user: Any, up: Any) -> Any:
    """The rule of :func:`float_variance_sensitivities`, for floats and for arrays."""
    grown = up(sens * _up(1.0 + 4.0 * UNIT_ROUNDOFF))
    slack = up(up((2.0 * per_user + 32.0) * UNIT_ROUNDOFF) * up(bound * bound))
    return up(grown + slack)


def _up_all(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.nextafter(x, math.inf)
    return out
