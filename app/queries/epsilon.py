"""Turning a requested epsilon into what is charged (exact) and what calibrates noise."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from app.db.base import to_epsilon
from app.errors import InvalidRequest

MIN_EPSILON = Decimal("1e-6")


@dataclass(frozen=True)
class EpsilonAmount:
    charged: Decimal  # exact, what the ledger records
    used: float  # what calibrates the noise; never more than ``charged``


def parse_epsilon(value: float, max_epsilon: Decimal) -> EpsilonAmount:
    """Validate ``0 < eps <= max_epsilon`` (finite) and split it as above."""
    if value is None or not math.isfinite(value) or value <= 0:
        raise InvalidRequest("epsilon must be a finite number > 0")
    if value > float(max_epsilon):
        raise InvalidRequest(f"epsilon must be at most max_epsilon_per_query = {max_epsilon}")
    charged = to_epsilon(value)
    if charged < MIN_EPSILON:
        raise InvalidRequest(f"epsilon must be at least {MIN_EPSILON}")
    if charged > max_epsilon:
        raise InvalidRequest(f"epsilon must be at most max_epsilon_per_query = {max_epsilon}")
    used = float(charged)
    if Decimal(used) > charged:  # binary rounding went up: step down one ulp
        used = math.nextafter(used, 0.0)
    return EpsilonAmount(charged=charged, used=used)
