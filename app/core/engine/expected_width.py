"""The width of the ci95 a release would publish, from public counts only (the release
preview's ``expected_ci95_width``; docs/math.md §11.6).

* A mechanism with a worst-case bias bound ``B`` (the linear ones, ``capped_weights``,
  ``auto`` with ``objective=interval``): ``2(b ln 20 + B)``, exactly the width before the
  interval is projected onto the range.
* ``user_window`` and the ``window`` variance: the interval's width depends on the window
  the private choice makes, and each window's width is public; the largest of them, an
  upper bound.
* Anything else (``centred_clip`` and ``centred``, whose widths depend on the private
  centre; levy and quantile, with no interval): the range.

Every figure is capped at the range's width: a projected interval is never wider.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core.data.counts import prepare_counts
from app.core.data.results import LN20, statistic_range
from app.core.engine.single_grid import plan
from app.core.mechanisms.mean_window import user_window_widths
from app.core.mechanisms.option_spec import OptionValue
from app.core.mechanisms.variance_window import window_variance_widths

__all__ = ["expected_ci95_width"]


def expected_ci95_width(
    statistic: str,
    counts: npt.ArrayLike,
    U: float,
    eps: float,
    mechanism: str = "auto",
    *,
    caps: npt.ArrayLike | None = None,
    **options: OptionValue,
) -> float:
    """The published ci95's width (at most; see the module docstring), public counts only."""
    found = plan(statistic, counts, U, eps, mechanism, caps=caps, **options)
    lo, hi = statistic_range(statistic, U)
    top = hi - lo
    if found.worst_case_bias is not None and found.noise_scale is not None:
        return min(top, 2.0 * (found.noise_scale * LN20 + found.worst_case_bias))
    info = prepare_counts(counts, caps)
    share = found.details.get("window_share")
    if found.mechanism == "user_window" and isinstance(share, float):
        return min(top, float(np.max(user_window_widths(info, float(U), float(eps), share))))
    if found.mechanism == "window" and isinstance(share, float):
        return min(top, float(np.max(window_variance_widths(info, float(U), float(eps), share))))
    return top
