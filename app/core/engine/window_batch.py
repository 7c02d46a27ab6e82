"""``user_window`` (mean) and the ``window`` variance of many grids at once (docs/math.md §9.4.9).

A slot release runs ``auto`` on every grid, and on most grids of a city ``auto`` takes the
window path. The mechanisms' rules are written in arrays over many grids
(:mod:`app.core.mechanisms.mean_window`, :mod:`app.core.mechanisms.variance_window`); here
every grid of a slot runs them together, the private choices as one OpenDP noisy-max
invocation per grid and statistic (:func:`app.core.noise.many.noisy_max_rows`), and the
rows become a :class:`PendingBatch`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.data.joined import JoinedGrids
from app.core.data.window_grids import WindowGrids, kept_records
from app.core.engine.batch import PendingBatch
from app.core.mechanisms.mean_window import (
    SPREAD_BETA,
    WindowDone,
    WindowRows,
    user_means,
    user_window_rows,
)
from app.core.mechanisms.variance_window import variance_window_rows
from app.core.noise.laplace import NoiseSource
from app.core.noise.many import calibrate_scales, noisy_max_rows

__all__ = ["start_window_releases"]

WINDOW_SHARE = 0.2  # the default of both mechanisms (app/core/mechanisms/option_spec.py)
_MECHANISM = {"mean": "user_window", "variance": "window"}


def _pending(
    wg: WindowGrids, statistic: str, eps: float, rows: WindowRows, done: WindowDone, U: float
) -> PendingBatch:
    """One statistic of every grid as rows: the estimate, sensitivity, scale, spread and
    details a grid's own release gives."""
    if not (np.all(done.below >= 0) and np.all(done.above >= 0)):  # BiasSpread's own check
        raise ValueError("invalid bias spread")
    n = done.value.size
    details: list[dict[str, object]] = [
        {
            "k": k,
            "window_share": WINDOW_SHARE,
            "eps_window": rows.eps_window,
            "eps_noise": rows.eps_noise,
            "selected_by": "auto",
            "window_hi": bi,
        }
        for k, bi in zip(wg.median.tolist(), done.b.tolist(), strict=True)
    ]
    return PendingBatch(
        statistic=[statistic] * n,
        mechanism=[_MECHANISM[statistic]] * n,
        epsilon=[eps] * n,
        value=done.value.tolist(),
        sensitivity=done.sensitivity.tolist(),
        scale=calibrate_scales(done.sensitivity, rows.eps_noise).tolist(),
        bias=[None] * n,
        spread=[
            (lo, hi, SPREAD_BETA)
            for lo, hi in zip(done.below.tolist(), done.above.tolist(), strict=True)
        ],
        kept=list(wg.eff),
        details=details,
        U=U,
    )


def start_window_releases(
    statistics: Sequence[str],
    joined: JoinedGrids,
    U: float,
    eps: float,
    noise: NoiseSource,
    known: WindowGrids | None = None,
) -> PendingBatch:
    """The rows of ``start_releases(statistics, grid, U, eps, "auto", caps=...)`` for each
    grid of ``joined``, all on ``auto``'s window path (the caller checks), grid after grid.
    ``known``: their :class:`WindowGrids`, if made."""
    wg = WindowGrids.of(joined) if known is None else known
    groups = wg.by_size()
    x, first = kept_records(joined, wg)
    parts: list[WindowRows] = []
    for statistic in statistics:
        if statistic == "mean":
            v = user_means(x, first, wg, U)
            parts.append(user_window_rows(wg, v, U, eps, WINDOW_SHARE, groups))
        else:
            parts.append(variance_window_rows(wg, x, first, U, eps, WINDOW_SHARE, groups))
    chosen = noisy_max_rows(noise, [(p.scores, p.eps_choice) for p in parts])
    done = [
        _pending(wg, s, eps, p, p.finish(j), U)
        for s, p, j in zip(statistics, parts, chosen, strict=True)
    ]
    return PendingBatch.interleave(done)  # grid after grid, its statistics in turn
