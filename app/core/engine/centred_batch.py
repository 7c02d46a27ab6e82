"""``auto``'s ``centred_clip`` of many grids at once (docs/math.md §5.8, §9.4.9).

Where ``auto`` takes ``centred_clip`` for the mean (its public gate open), the grids of a
slot release run the mechanism's array rule together
(:func:`app.core.mechanisms.mean_centred.centred_clip_rows`, the rule one grid runs as a
batch of one): each private choice one OpenDP noisy-max invocation per grid, and the rows
become a :class:`PendingBatch` with the fields a grid's own release gives.
"""

from __future__ import annotations

import numpy as np

from app.core.data.joined import JoinedGrids
from app.core.data.window_grids import WindowGrids, kept_records
from app.core.engine.batch import PendingBatch
from app.core.mechanisms.mean_centred import NAME, centred_clip_rows, centred_shares, user_sums
from app.core.mechanisms.mean_window import SPREAD_BETA
from app.core.mechanisms.registry import float_option, validate_options
from app.core.noise.laplace import NoiseSource
from app.core.noise.many import calibrate_scales

__all__ = ["start_centred_releases"]


def start_centred_releases(
    joined: JoinedGrids, U: float, eps: float, noise: NoiseSource
) -> PendingBatch:
    """The rows of ``start_releases(("mean",), grid, U, eps, "auto", caps=...)`` for each
    grid of ``joined``, all on ``auto``'s ``centred_clip`` path (the caller checks)."""
    opts = validate_options("mean", NAME, {})  # auto runs the options' defaults
    centre_share = float_option(opts, "centre_share")
    width_share = float_option(opts, "width_share")
    width_factor = float_option(opts, "width_factor")
    shares = centred_shares(eps, centre_share, width_share)
    wg = WindowGrids.of(joined)
    x, first = kept_records(joined, wg)
    done = centred_clip_rows(noise, wg, user_sums(x, first, wg, U), U, shares, width_factor)
    if not (np.all(done.below >= 0) and np.all(done.above >= 0)):  # BiasSpread's own check
        raise ValueError("invalid bias spread")
    e1, e2, e3 = shares
    head: dict[str, object] = {
        "centre_share": centre_share,
        "width_share": width_share,
        "width_factor": width_factor,
        "path": "adaptive",
        "eps_centre": e1,
        "eps_width": e2,
        "eps_noise": e3,
        "selected_by": "auto",
    }
    n = done.value.size
    return PendingBatch(
        statistic=["mean"] * n,
        mechanism=[NAME] * n,
        epsilon=[eps] * n,
        value=done.value.tolist(),
        sensitivity=done.sensitivity.tolist(),
        scale=calibrate_scales(done.sensitivity, e3).tolist(),
        bias=[None] * n,
        spread=[
            (lo, hi, SPREAD_BETA)
            for lo, hi in zip(done.below.tolist(), done.above.tolist(), strict=True)
        ],
        kept=list(wg.eff),
        details=[
            {**head, "centre": c, "half_width": R}
            for c, R in zip(done.centre.tolist(), done.half_width.tolist(), strict=True)
        ],
        U=U,
    )
