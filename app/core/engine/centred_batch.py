"""``auto``'s centred mechanisms of many grids at once (docs/math.md §5.8, §11.4, §9.4.9).

Where ``auto`` takes ``centred_clip`` for the mean or ``centred`` for the variance (their
public gates open), the grids of a slot release run the mechanism's array rule together
(:func:`app.core.mechanisms.mean_centred.centred_clip_rows`,
:func:`app.core.mechanisms.variance_centred.centred_variance_rows`: the rules one grid
runs as a batch of one), each private choice one OpenDP noisy-max invocation per grid;
the rows become a :class:`PendingBatch` with the fields a grid's own release gives.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.data.joined import JoinedGrids
from app.core.data.window_grids import WindowGrids, kept_records
from app.core.engine.batch import PendingBatch
from app.core.mechanisms import mean_centred as mc
from app.core.mechanisms import variance_centred as vc
from app.core.mechanisms.mean_window import SPREAD_BETA
from app.core.mechanisms.registry import float_option, validate_options
from app.core.noise.laplace import NoiseSource
from app.core.noise.many import calibrate_scales

__all__ = ["CENTRED_PATH", "start_centred_releases"]

#: the mechanism ``auto`` runs on each statistic's centred path
CENTRED_PATH = {"mean": mc.NAME, "variance": vc.NAME}


def start_centred_releases(
    statistics: Sequence[str],
    joined: JoinedGrids,
    U: float,
    eps: float,
    noise: NoiseSource,
    idx: Sequence[int] | None = None,
) -> list[PendingBatch]:
    """Per statistic, the rows of ``start_releases((statistic,), grid, U, eps, "auto",
    caps=...)`` for each grid of ``joined`` (``idx``: of those grids, in that order), all
    on ``auto``'s centred path for every statistic (the caller checks); the grids' users
    and kept records gathered once."""
    if idx is None:
        wg = WindowGrids.of(joined)
        x, first = kept_records(joined, wg)
    else:  # the grids' users only: their records gathered once, not copied twice
        some, users = joined.take_counts(idx)
        wg = WindowGrids.of(some)
        x, first = kept_records(joined, wg, users)
    return [_rows(s, wg, x, first, U, eps, noise) for s in statistics]


def _rows(
    statistic: str,
    wg: WindowGrids,
    x: np.ndarray,
    first: np.ndarray,
    U: float,
    eps: float,
    noise: NoiseSource,
) -> PendingBatch:
    name = CENTRED_PATH[statistic]
    opts = validate_options(statistic, name, {})  # auto runs the options' defaults
    if statistic == "mean":
        centre_share = float_option(opts, "centre_share")
        width_share = float_option(opts, "width_share")
        width_factor = float_option(opts, "width_factor")
        shares = mc.centred_shares(eps, centre_share, width_share)
        done = mc.centred_clip_rows(
            noise, wg, mc.user_sums(x, first, wg, U), U, shares, width_factor
        )
        head: list[dict[str, object]] = [
            {"centre_share": centre_share, "width_share": width_share,
             "width_factor": width_factor, "path": "adaptive", "eps_centre": shares[0],
             "eps_width": shares[1], "eps_noise": shares[2], "selected_by": "auto"}
        ] * done.value.size  # fmt: skip
        chosen = [
            {"centre": c, "half_width": R}
            for c, R in zip(done.centre.tolist(), done.half_width.tolist(), strict=True)
        ]
        below, above, value, sens = done.below, done.above, done.value, done.sensitivity
    else:
        shares = vc.centred_variance_shares(
            eps, float_option(opts, "centre_share"), float_option(opts, "moment_share")
        )
        var = vc.centred_variance_rows(noise, wg, x, first, U, shares)
        head = [
            {"k": k, "eps_centre": shares[0], "eps_moment": shares[1], "eps_noise": shares[2],
             "selected_by": "auto"}
            for k in wg.median.tolist()
        ]  # fmt: skip
        chosen = [
            {"centre": c, "moment_clip": Q}
            for c, Q in zip(var.centre.tolist(), var.moment_clip.tolist(), strict=True)
        ]
        below, above, value, sens = var.below, var.above, var.value, var.sensitivity
    if not (np.all(below >= 0) and np.all(above >= 0)):  # BiasSpread's own check
        raise ValueError("invalid bias spread")
    n = value.size
    return PendingBatch(
        statistic=[statistic] * n,
        mechanism=[name] * n,
        epsilon=[eps] * n,
        value=value.tolist(),
        sensitivity=sens.tolist(),
        scale=calibrate_scales(sens, shares[2]).tolist(),
        bias=[None] * n,
        spread=[
            (lo, hi, SPREAD_BETA) for lo, hi in zip(below.tolist(), above.tolist(), strict=True)
        ],
        kept=list(wg.eff),
        details=[{**h, **c} for h, c in zip(head, chosen, strict=True)],
        U=U,
    )
