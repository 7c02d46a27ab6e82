"""Predicted error of a statistic from public counts (the release preview's ``expected_error``).

For ``auto``, :func:`app.core.expected_error` (docs/math.md §11) on the kept counts; for
any other mechanism, the worst-case error of its plan (or its noise scale where it has
no bound).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app import core


def expected_error(
    statistic: str,
    counts: np.ndarray,
    U: float,
    eps: float,
    mechanism: str = "auto",
    *,
    caps: np.ndarray | None = None,
    **options: str,
) -> float:
    """Expected absolute error of ``statistic`` released with ``mechanism`` at ``eps`` on
    a grid with these per-user ``counts``, each user limited to its ``caps`` records."""
    if mechanism == "auto" and options.get("objective", "accuracy") == "accuracy":
        kept = counts if caps is None else np.minimum(counts, caps)
        return float(core.expected_error(statistic, kept[kept > 0], U, eps))
    plan = core.plan(statistic, counts, U, eps, mechanism, caps=caps, **options)
    error = plan.worst_case_error
    if error is None:  # no bound: the noise's own scale (mean absolute Laplace error)
        error = plan.noise_scale if plan.noise_scale is not None else float("inf")
    return float(error)


def expected_errors(
    statistic: str,
    counts: Sequence[np.ndarray],
    caps: Sequence[np.ndarray],
    U: float,
    eps: float,
    mechanism: str = "auto",
    **options: str,
) -> list[float]:
    """:func:`expected_error` of many grids (grid ``i``: ``counts[i]`` limited to
    ``caps[i]``, some kept), the same floats: ``auto``'s in arrays."""
    if mechanism == "auto" and options.get("objective", "accuracy") == "accuracy":
        kept = [np.minimum(c, k) for c, k in zip(counts, caps, strict=True)]
        out: list[float] = core.expected_errors(statistic, kept, U, eps).tolist()
        return out
    return [
        expected_error(statistic, c, U, eps, mechanism, caps=k, **options)
        for c, k in zip(counts, caps, strict=True)
    ]
