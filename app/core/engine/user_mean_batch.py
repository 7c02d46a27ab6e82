"""``user_mean`` of many grids at once: the release path's form of docs/math.md §13.

A slot or profile release asks ``user_mean`` of every released grid. Its mechanism has
no private step, so each grid is a few array operations on its units
(:mod:`app.core.mechanisms.user_mean`), run here over all the grids' units at once:
per-unit sums of each unit's own kept records (``np.add.reduceat`` over its segment,
the same operation the single-grid path reads through ``GridData.user_moments``), then
the public figures and the exact per-grid sums. The rows go into a
:class:`~app.core.engine.batch.PendingBatch`; :func:`~app.core.engine.batch.finish_batch`
adds the Laplace noise through the one batched OpenDP path (docs/math.md §9.4.7).

For the planner, :func:`expected_user_mean_widths` gives each grid's ci95 width from
public counts only (the width before projection, capped at ``U``), the figure
``expected_ci95_width("user_mean", …)`` gives grid by grid.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np

from app.core.data.joined import JoinedGrids, offsets
from app.core.engine.batch import PendingBatch
from app.core.mechanisms.user_mean import NAME, user_mean_public, user_mean_values

__all__ = ["expected_user_mean_widths", "start_user_mean_releases", "user_mean_sums"]


def user_mean_sums(joined: JoinedGrids, eff: np.ndarray) -> np.ndarray:
    """Per unit, the sum of its earliest ``eff`` records from its own values alone (0 where
    nothing is kept): ``np.add.reduceat`` over each unit's kept segment."""
    starts = offsets(joined.counts)[:-1]
    read = np.flatnonzero(eff > 0)
    out = np.zeros(eff.size)
    if read.size:
        lens = eff[read]
        first = offsets(lens)
        idx = np.repeat(starts[read] - first[:-1], lens) + np.arange(int(first[-1]))
        out[read] = np.add.reduceat(joined.values[idx], first[:-1])
    return out


def start_user_mean_releases(
    joined: JoinedGrids,
    U: float,
    eps: float,
    mechanism: str = "auto",
    options: Mapping[str, object] | None = None,
) -> PendingBatch:
    """One ``user_mean`` row per grid of ``joined`` (caps ``>= 0``, values checked by the
    caller: :func:`app.core.engine.window_batch.fits`), up to its Laplace step: the same
    estimate, sensitivity, scale and bias as the single-grid draft
    (``registry.draft("user_mean", …)``). ``mechanism``: ``auto`` or ``baseline``;
    ``options``: the validated ones, copied into each row's details."""
    if mechanism not in ("auto", NAME):
        raise ValueError(f"unknown user_mean mechanism {mechanism!r}; use auto or {NAME}")
    eff = np.minimum(joined.counts, joined.caps)
    if np.any(eff < 0):
        raise ValueError("caps must be >= 0")
    pub = user_mean_public(joined.counts, eff, joined.pairs, U, eps)
    values = user_mean_values(joined.counts, eff, user_mean_sums(joined, eff), joined.pairs, U)
    G = joined.n_grids
    auto = {"selected_by": "auto", **(options or {})} if mechanism == "auto" else {}
    details: list[dict[str, object]] = [
        {"units": L, "units_read": K, "units_left_out": L - K, **auto}
        for L, K in zip(pub.units.tolist(), pub.kept.tolist(), strict=True)
    ]
    bounds = joined.pairs.tolist()
    return PendingBatch(
        statistic=["user_mean"] * G,
        mechanism=[NAME] * G,
        epsilon=[float(eps)] * G,
        value=values.tolist(),
        sensitivity=pub.sensitivity.tolist(),
        scale=pub.scale.tolist(),
        bias=pub.bias.tolist(),
        spread=[None] * G,
        kept=[eff[a:b] for a, b in itertools.pairwise(bounds)],
        details=details,
        U=float(U),
    )


def expected_user_mean_widths(
    counts: Sequence[np.ndarray], caps: Sequence[np.ndarray | None], U: float, eps: float
) -> np.ndarray:
    """Each grid's ``user_mean`` ci95 width from its public counts and caps (``None``: all
    kept) at ``eps``: ``min(U, 2(b ln 20 + B))``, what a release of it publishes at most."""
    c = [np.asarray(x, dtype=np.int64) for x in counts]
    e = [
        x if k is None else np.minimum(x, np.asarray(k, dtype=np.int64))
        for x, k in zip(c, caps, strict=True)
    ]
    pairs = offsets(np.array([x.size for x in c], dtype=np.int64))
    joined_counts = np.concatenate([np.empty(0, dtype=np.int64), *c])
    joined_eff = np.concatenate([np.empty(0, dtype=np.int64), *e])
    return user_mean_public(joined_counts, joined_eff, pairs, U, eps).width
