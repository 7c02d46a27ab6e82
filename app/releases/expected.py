"""Predicted error of a statistic from public counts (the release preview's ``expected_error``).

For ``auto``, :func:`app.core.expected_errors` (docs/math.md §11) on the kept counts, in
arrays; for any other mechanism, the worst-case error of its plan (or its noise scale where
it has no bound).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app import core


def expected_errors(
    statistic: str,
    counts: Sequence[np.ndarray],
    caps: Sequence[np.ndarray],
    U: float,
    eps: float,
    mechanism: str = "auto",
    **options: str,
) -> list[float]:
    """Expected absolute error of ``statistic`` released with ``mechanism`` at ``eps`` on
    each grid ``i``: per-user ``counts[i]``, each user limited to ``caps[i]`` records."""
    if mechanism == "auto" and options.get("objective", "accuracy") == "accuracy":
        kept = [np.minimum(c, k) for c, k in zip(counts, caps, strict=True)]
        out: list[float] = core.expected_errors(statistic, kept, U, eps).tolist()
        return out
    return [_plan_error(core.plan(statistic, c, U, eps, mechanism, caps=k, **options))
            for c, k in zip(counts, caps, strict=True)]  # fmt: skip


def _plan_error(plan: core.Plan) -> float:
    error = plan.worst_case_error
    if error is None:  # no bound: the noise's own scale (mean absolute Laplace error)
        error = plan.noise_scale if plan.noise_scale is not None else float("inf")
    return float(error)
