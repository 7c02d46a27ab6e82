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
:func:`expected_ci95_widths` gives the same floats for many grids at once, in arrays
where ``auto`` runs with its default objective (its paths from each grid's median count
and active users, the windows' widths over all grids together).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from app.core.data.counts import prepare_counts
from app.core.data.joined import JoinedGrids, offsets
from app.core.data.results import LN20, statistic_range
from app.core.data.window_grids import WindowGrids
from app.core.engine.single_grid import plan
from app.core.engine.user_mean_batch import expected_user_mean_widths
from app.core.mechanisms.auto import auto_path
from app.core.mechanisms.mean_window import user_window_grid_widths, user_window_widths
from app.core.mechanisms.option_spec import VAR_WINDOW_SHARE, WINDOW_SHARE, OptionValue
from app.core.mechanisms.variance_window import (
    window_variance_grid_widths,
    window_variance_widths,
)

__all__ = ["expected_ci95_width", "expected_ci95_widths"]

#: the windows ``auto`` runs on each statistic's window path, and their default shares
_WINDOW = {"mean": ("user_window", WINDOW_SHARE), "variance": ("window", VAR_WINDOW_SHARE)}


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


def expected_ci95_widths(
    statistic: str,
    counts: Sequence[np.ndarray],
    caps: Sequence[np.ndarray],
    U: float,
    eps: float,
    mechanism: str = "auto",
    options: Mapping[str, OptionValue] | None = None,
) -> np.ndarray:
    """:func:`expected_ci95_width` of many grids (each its counts and caps), the same floats;
    in arrays for ``auto`` with its default objective and ``user_mean``, else grid by grid."""
    opts = dict(options or {})
    batched = mechanism == "auto" and opts in ({}, {"objective": "accuracy"})
    if not batched or not counts or statistic not in ("mean", "variance", "user_mean"):
        return np.array(
            [
                expected_ci95_width(statistic, c, U, eps, mechanism, caps=k, **opts)
                for c, k in zip(counts, caps, strict=True)
            ],
            dtype=np.float64,
        )
    if statistic == "user_mean":
        return np.asarray(expected_user_mean_widths(counts, list(caps), U, eps), dtype=np.float64)
    wg = _window_grids(counts, caps)
    lo, hi = statistic_range(statistic, U)
    out = np.full(wg.L.size, hi - lo)
    # auto's path is a function of (median count, active users): once per distinct pair
    pairs, which = np.unique(np.stack([wg.median, wg.L]), axis=1, return_inverse=True)
    path, spec = _WINDOW[statistic]
    on_window = np.array([auto_path(statistic, k, n, eps) == path for k, n in pairs.T.tolist()])
    window = np.flatnonzero(on_window[which.reshape(-1)])
    if window.size:
        sub = wg
        if window.size < wg.L.size:
            idx = window.tolist()
            sub = _window_grids([counts[i] for i in idx], [caps[i] for i in idx])
        widths = user_window_grid_widths if statistic == "mean" else window_variance_grid_widths
        share = float(spec.default)  # type: ignore[arg-type]
        out[window] = np.minimum(out[window], widths(sub, float(U), float(eps), share).max(axis=1))
    return out


def _window_grids(counts: Sequence[np.ndarray], caps: Sequence[np.ndarray]) -> WindowGrids:
    """The grids' public counts and caps as :class:`WindowGrids` (no values needed)."""
    c = [np.asarray(x, dtype=np.int64) for x in counts]
    return WindowGrids.of(
        JoinedGrids(
            counts=np.concatenate(c),
            caps=np.concatenate([np.asarray(k, dtype=np.int64) for k in caps]),
            values=np.empty(0),
            pairs=offsets(np.array([x.size for x in c], dtype=np.int64)),
            records=offsets(np.array([int(x.sum()) for x in c], dtype=np.int64)),
        )
    )
