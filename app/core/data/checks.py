"""Checks of the two public numbers every computation takes: ``ε`` and the bound ``U``."""

from __future__ import annotations

import math

__all__ = ["check_bound", "check_epsilon"]


def check_epsilon(eps: float) -> float:
    """Return ``eps`` as a float if it is finite and > 0, else raise ``ValueError``."""
    eps = float(eps)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"epsilon must be finite and > 0, got {eps!r}")
    return eps


def check_bound(U: float) -> float:
    """Return the value bound ``U`` as a float if it is finite and > 0."""
    U = float(U)
    if not math.isfinite(U) or U <= 0.0:
        raise ValueError(f"value bound U must be finite and > 0, got {U!r}")
    return U
