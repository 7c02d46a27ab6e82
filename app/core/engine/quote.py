"""``quote_epsilon``: the smallest ε whose worst-case error reaches a target (public counts)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core.data.counts import CountsInfo
from app.core.engine.single_grid import plan_from_draft, prepare
from app.core.mechanisms.registry import BOUNDED_CANDIDATES, STATISTICS, draft

__all__ = ["quote_epsilon"]


def _error_at(statistic: str, info: CountsInfo, U: float, eps: float, name: str) -> float:
    err = draft(statistic, info, U, eps, name, {}).nominal_error()
    assert err is not None
    return err


def _smallest_eps(
    statistic: str,
    info: CountsInfo,
    U: float,
    target: float,
    name: str,
    max_eps: float,
    min_eps: float,
) -> float | None:
    """Bisection (in log ε) for the smallest ε >= min_eps with error <= target; errors
    fall with ε."""
    if _error_at(statistic, info, U, max_eps, name) > target:
        return None
    floor = max(min_eps, max_eps * 2.0**-40)
    if _error_at(statistic, info, U, floor, name) <= target:
        return floor
    lo, hi = floor, max_eps
    while hi / lo > 1.0 + 1e-9:
        mid = float(np.sqrt(lo * hi))
        if _error_at(statistic, info, U, mid, name) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def quote_epsilon(
    counts: npt.ArrayLike,
    U: float,
    target_error: float,
    statistic: str = "mean",
    *,
    max_epsilon: float,
    min_epsilon: float = 0.0,
    caps: npt.ArrayLike | None = None,
) -> tuple[float, str] | None:
    """The smallest ``min_epsilon <= ε <= max_epsilon`` (and its mechanism) whose
    worst-case error <= target.

    Public counts only. Each mechanism with a bound is bisected in log ``ε`` to a
    relative 1e-9 (their errors are non-increasing in ``ε``; for ``opt_array``, whose
    arrays change with ``ε``, the result is an ``ε`` where the target holds, not
    provably the smallest); the returned pair is re-checked with the noise scale OpenDP
    certifies. ``None`` when no mechanism reaches the target within ``max_epsilon``.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; use 'mean', 'variance' or 'user_mean'")
    info, U, max_eps = prepare(counts, U, max_epsilon, caps)
    target = float(target_error)
    if not np.isfinite(target) or target <= 0:
        raise ValueError(f"target error must be finite and > 0, got {target_error!r}")
    found = []
    for name in BOUNDED_CANDIDATES[statistic]:
        eps = _smallest_eps(statistic, info, U, target, name, max_eps, min(min_epsilon, max_eps))
        if eps is not None:
            found.append((eps, name))
    for eps, name in sorted(found):
        for _ in range(8):  # OpenDP may nudge the scale up by a few ulps
            plan = plan_from_draft(draft(statistic, info, U, eps, name, {}))
            assert plan.worst_case_error is not None
            if plan.worst_case_error <= target:
                return eps, name
            eps = min(eps * (1.0 + 1e-9), max_eps)
    return None
