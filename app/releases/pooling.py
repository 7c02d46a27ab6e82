"""Grids pooled in memory: several grids' records as one grid, per privacy unit.

A profile's grid (``app.releases.profiles``) pools one cell's records of one time of day
over many dates, and an adaptive profile pools fine cells into their released ancestor.
Each source grid's users become privacy units (``unit = window << USER_BITS | user``, the
budget subject of its date's window; without windows the user itself), and a unit seen
in several source grids of one target is one user of the pooled grid: its counts added,
its values one after the other in source order (earliest date first, each date's earliest
record first). Only public occupancy decides which grid pools into which; nothing here
reads a value to choose anything.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.datasets.grid_batch import GridColumns
from app.datasets.grid_store import GridArrays
from app.ledger.accounts import USER_BITS


def _offsets(sizes: np.ndarray) -> np.ndarray:
    out = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def pool(
    cols: GridColumns, target: np.ndarray, window: np.ndarray | None, n_targets: int
) -> GridColumns:
    """The ``n_targets`` grids pooled from ``cols``' grids: source grid ``i`` goes into
    ``target[i]`` (``-1``: into none), its users as units of window ``window[i]`` (``None``:
    the users are units already). Units ascending within each pooled grid."""
    target = np.asarray(target, dtype=np.int64)
    sizes = cols.sizes
    if target.size != sizes.size:
        raise ValueError("pool: one target per source grid")
    pair_grid = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    pair_target = target[pair_grid]
    unit = cols.user_ids.astype(np.int64, copy=False)
    if window is not None:
        unit = (np.asarray(window, dtype=np.int64)[pair_grid] << USER_BITS) | unit
    counts = cols.counts.astype(np.int64, copy=False)
    # where each pair's values start: its grid's records, then the counts before it
    before = _offsets(counts)
    start = cols.records[:-1][pair_grid] + before[:-1] - before[cols.pairs[:-1]][pair_grid]
    keep = np.flatnonzero(pair_target >= 0)
    order = keep[np.lexsort((pair_grid[keep], unit[keep], pair_target[keep]))]
    t, u, c = pair_target[order], unit[order], counts[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (t[1:] != t[:-1]) | (u[1:] != u[:-1])
    heads = np.flatnonzero(new)
    pooled_counts = np.add.reduceat(c, heads) if heads.size else np.empty(0, dtype=np.int64)
    out_offsets = _offsets(c)
    within = np.arange(int(out_offsets[-1]), dtype=np.int64) - np.repeat(out_offsets[:-1], c)
    values = cols.values[np.repeat(start[order], c) + within]
    per_target = np.bincount(t[heads], minlength=n_targets).astype(np.int64)
    records = np.bincount(t, weights=c, minlength=n_targets).astype(np.int64)
    return GridColumns(u[heads], pooled_counts, values, _offsets(per_target), _offsets(records))


def arrays_of(cols: GridColumns, versions: Sequence[int] | None = None) -> list[GridArrays]:
    """Each grid of ``cols`` as engine input (views into the columns; id 0: not stored)."""
    out = []
    for i in range(cols.pairs.size - 1):
        p, q = cols.pairs[i], cols.pairs[i + 1]
        r, s = cols.records[i], cols.records[i + 1]
        version = 0 if versions is None else versions[i]
        out.append(GridArrays(0, version, cols.user_ids[p:q], cols.counts[p:q], cols.values[r:s]))
    return out
