"""Predicted error of a statistic from public counts (the release preview's ``expected_error``).

For ``auto``, :func:`app.core.expected_error` (docs/math.md §11) on the kept counts; for
any other mechanism, the worst-case error of its plan (or its noise scale where it has
no bound).
"""

from __future__ import annotations

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
