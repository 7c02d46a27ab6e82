"""Grids pooled in memory: several grids' records as one grid, per privacy unit.

A profile's grid (``app.releases.profiles``) pools one cell's records of one time of day
over many dates, and an adaptive profile pools fine cells into their released ancestor.
Each source grid's users become privacy units: the pair (its date's budget window, user),
whose ledger subject is ``window << USER_BITS | user`` (without windows the user itself).
A unit is numbered by its rank among the units present (:func:`units_of`: dense, in the
subjects' order, so the planner's sorts and counts stay linear), and a unit seen in
several source grids of one target is one user of the pooled grid: its counts added,
its values one after the other in source order (earliest date first, each date's
earliest record first). Only public occupancy decides which grid pools into which;
nothing here reads a value to choose anything.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.data.joined import offsets
from app.core.data.occupancy import stable_order, unique_inverse
from app.datasets.grid_batch import GridColumns
from app.datasets.grid_store import GridArrays
from app.ledger.accounts import USER_BITS


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of non-negative int64s: a counting sort where
    the keys are dense."""
    top = int(keys.max()) + 1 if keys.size else 0
    if top <= 4 * keys.size + 1024:
        return np.asarray(stable_order(keys, top), dtype=np.int64)
    return np.argsort(keys, kind="stable")


def units_of(cols: GridColumns, window: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's unit (its rank among the distinct units, ascending in subject order)
    and each unit's ledger subject: ``window[i] << USER_BITS | user`` for source grid
    ``i`` (``None``: the user itself)."""
    users = cols.user_ids.astype(np.int64, copy=False)
    if not users.size:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if window is None:
        subjects, unit = unique_inverse(users)
        return unit, subjects
    pair_window = np.repeat(np.asarray(window, dtype=np.int64), cols.sizes)
    low = int(users.min())
    span = int(users.max()) - low + 1
    # (window, user) as one small code in the same order, so ranking it needs no sort
    codes, unit = unique_inverse(pair_window * span + (users - low))
    subjects = ((codes // span) << USER_BITS) | (codes % span + low)
    return unit, subjects


#: Pooled records are copied run by run when runs average at least this many records.
RUN_RECORDS = 64


def _gathered(values: np.ndarray, first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The records ``values[first[i] : first[i] + counts[i]]`` of each pair ``i`` in turn.
    Pairs whose records follow each other in ``values`` (a profile's source grids pool
    whole, in order) form runs, each copied as one slice; many short runs take one gather
    (each record's source position: its pair's start, then 0, 1, ...)."""
    if not first.size:
        return values[:0].copy()
    ends = first + counts
    runs = np.flatnonzero(np.r_[True, first[1:] != ends[:-1]])
    if runs.size * RUN_RECORDS <= int(counts.sum()):
        lo = first[runs].tolist()
        hi = ends[np.r_[runs[1:] - 1, first.size - 1]].tolist()
        return np.concatenate([values[a:b] for a, b in zip(lo, hi, strict=True)])
    source = np.repeat(first - offsets(counts)[:-1], counts)  # in place: 2·10⁷ records
    source += np.arange(source.size, dtype=np.int64)  # make each temporary 160 MB
    return values[source]


def pool(
    cols: GridColumns, target: np.ndarray, units: np.ndarray | None, n_targets: int
) -> GridColumns:
    """The ``n_targets`` grids pooled from ``cols``' grids: source grid ``i`` goes into
    ``target[i]`` (``-1``: into none), its pairs' users as ``units`` (one per pair, dense
    from 0: :func:`units_of`; ``None``: the users are such units already). Units
    ascending within each pooled grid."""
    target = np.asarray(target, dtype=np.int64)
    sizes = cols.sizes
    if target.size != sizes.size:
        raise ValueError("pool: one target per source grid")
    unit = cols.user_ids if units is None else units
    unit = np.asarray(unit, dtype=np.int64)
    pair_target = np.repeat(target, sizes)
    counts = cols.counts.astype(np.int64, copy=False)
    # where each pair's values start: its grid's first record, then the counts before it
    before = offsets(counts)
    if _in_order(target, pair_target, unit) and np.array_equal(cols.records, before[cols.pairs]):
        # each pair its own pooled pair, its records where pooling would put them: no copy
        per_target = np.bincount(pair_target, minlength=n_targets).astype(np.int64)
        records = np.bincount(pair_target, weights=counts, minlength=n_targets).astype(np.int64)
        return GridColumns(unit, counts, cols.values, offsets(per_target), offsets(records))
    start = np.repeat(cols.records[:-1] - before[cols.pairs[:-1]], sizes) + before[:-1]
    keep = np.flatnonzero(pair_target >= 0)
    # by (target, unit), source order within: two stable counting sorts (pairs are in
    # source order), linear in the pairs, units and targets
    by_unit = keep[_stable_order(unit[keep])]
    order = by_unit[_stable_order(pair_target[by_unit])]
    t, u, c = pair_target[order], unit[order], counts[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (t[1:] != t[:-1]) | (u[1:] != u[:-1])
    heads = np.flatnonzero(new)
    pooled_counts = np.add.reduceat(c, heads) if heads.size else np.empty(0, dtype=np.int64)
    values = _gathered(cols.values, start[order], c)
    per_target = np.bincount(t[heads], minlength=n_targets).astype(np.int64)
    records = np.bincount(t, weights=c, minlength=n_targets).astype(np.int64)
    return GridColumns(u[heads], pooled_counts, values, offsets(per_target), offsets(records))


def _in_order(target: np.ndarray, pair_target: np.ndarray, unit: np.ndarray) -> bool:
    """Whether every source grid goes into some target and the pairs are by (target,
    unit) strictly ascending: no unit twice in one target (nothing to add up), and the
    pooled order is the pairs' own."""
    if not pair_target.size or int(target.min()) < 0:
        return False
    step_t, step_u = np.diff(pair_target), np.diff(unit)
    return bool(np.all((step_t > 0) | ((step_t == 0) & (step_u > 0))))


def arrays_of(cols: GridColumns, versions: Sequence[int] | None = None) -> list[GridArrays]:
    """Each grid of ``cols`` as engine input (views into the columns; id 0: not stored)."""
    out = []
    for i in range(cols.pairs.size - 1):
        p, q = cols.pairs[i], cols.pairs[i + 1]
        r, s = cols.records[i], cols.records[i + 1]
        version = 0 if versions is None else versions[i]
        out.append(GridArrays(0, version, cols.user_ids[p:q], cols.counts[p:q], cols.values[r:s]))
    return out
