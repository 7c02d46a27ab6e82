"""Turning a requested epsilon into what is charged (exact) and what calibrates noise."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from app import budget
from app.kit.errors import InvalidRequest

MIN_EPSILON = Decimal("1e-6")
MAX_EPSILON = 1e12


@dataclass(frozen=True)
class EpsilonAmount:
    charged: Decimal  # exact, what the ledger records
    used: float  # what calibrates the noise; never more than ``charged``


def parse_epsilon(value: float, max_epsilon: Decimal | None = None) -> EpsilonAmount:
    """Validate ``0 < eps`` (finite; and ``<= max_epsilon`` when given) and split it as above."""
    if value is None or not math.isfinite(value) or value <= 0:
        raise InvalidRequest(f"epsilon must be a finite number > 0 (sent {value})")
    if value < float(MIN_EPSILON):  # the OpenAPI minimum (charged rounds up from it)
        raise InvalidRequest(f"epsilon must be at least {MIN_EPSILON} (sent {value:g})")
    if max_epsilon is not None and value > float(max_epsilon):
        raise InvalidRequest(
            f"epsilon must be at most the dataset's max_epsilon_per_query = {max_epsilon} "
            f"(sent {value:g})"
        )
    if value >= MAX_EPSILON:  # more than the ledger's NUMERIC(24, 12) holds
        raise InvalidRequest(f"epsilon must be below {MAX_EPSILON:g} (and its dataset's maximum)")
    charged = budget.charged(value)
    eps = EpsilonAmount(charged=charged, used=budget.float_at_most(charged))
    if max_epsilon is not None:
        check_max_epsilon(eps, max_epsilon)
    return eps


def check_max_epsilon(eps: EpsilonAmount, max_epsilon: Decimal) -> None:
    """Refuse ``eps`` above the dataset's ``max_epsilon_per_query``."""
    if eps.charged > max_epsilon:
        raise InvalidRequest(f"epsilon must be at most max_epsilon_per_query = {max_epsilon}")


def equal_share(eps: EpsilonAmount, n: int) -> EpsilonAmount:
    """One of ``n`` equal shares of ``eps`` (a release's statistics): ``n`` float shares
    sum to at most ``eps.used`` exactly, so the statistics together spend at most what is
    charged (basic composition; ``used / n`` is rounded down where it rounds up)."""
    if n == 1:
        return eps
    used = eps.used / n
    while Fraction(used) * n > Fraction(eps.used):
        used = math.nextafter(used, 0.0)
    return EpsilonAmount(eps.charged / n, used)
