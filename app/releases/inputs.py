"""What a release body asks for, read from public occupancy: the slots' grids, the ones
released (fixed resolution, or an adaptive partition), their occupancy and coverage,
and the plan at an epsilon (given, or the largest within ``max_user_cost``).

An adaptive partition's cell widths depend on the per-grid epsilon, and with
``max_user_cost`` that epsilon depends on the partition (through Clip-User's K): the
two are iterated from the pessimistic start ``max_user_cost / G1`` until the partition
repeats (at most ``ADAPTIVE_ROUNDS`` times). Every step reads public information only
(docs/math.md §6.6), so any round's result may be released.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from functools import cached_property, partial
from typing import Any

import h3
import numpy as np
from sqlalchemy.orm import Session

from app import budget
from app.answers.epsilon import EpsilonAmount
from app.core.planning.partition import FINE_WEIGHT
from app.datasets.grid_batch import GridBatch, GridColumns, load_grid_batch
from app.datasets.grid_store import GridArrays, SlotGrid
from app.datasets.models import Dataset
from app.kit.errors import InvalidRequest
from app.releases.adaptive import (
    AdaptiveGrids,
    Coverage,
    SpanTrees,
    adaptive_grids,
    coverage,
)
from app.releases.interval_plan import candidate_ks, plan_at_k, plan_for_intervals
from app.releases.per_cell import CellWidths, WidthRule
from app.releases.planning import (
    Occupancy,
    PlanOptions,
    SlotPlan,
    grids_per_user,
    live_pairs,
    plan_at,
    plan_for_cost,
)
from app.releases.request import ReleaseRequest
from app.releases.slot import SpanGrids, span_grids
from app.time.slots import datetime_to_us

ADAPTIVE_ROUNDS = 3
#: Choosing among partitions with per-cell ε: a useful record at the finest resolution is
#: worth this much more than one at the coarsest (twice the partition's own ``φ``).
CHOICE_FINE_WEIGHT = 2 * FINE_WEIGHT
#: ... among the partitions with at least this share of the most useful records.
USEFUL_KEPT = 0.9
#: Planned for intervals, the partitions tried: one per ``k`` = 1 .. this many.
ADAPTIVE_KS = 6


@dataclass(frozen=True)
class ReleaseInput:
    """The released grids of the span, their arrays and occupancy, and the coverage."""

    dataset: Dataset
    span: SpanGrids  # every grid of the slots at the finest level asked
    grids: list[SlotGrid]  # the released ones (coarser ones too, when adaptive)
    arrays: list[GridArrays]
    occ: Occupancy
    coverage: Coverage
    skipped: int  # grids of the span whose records are not released
    joined: GridColumns | None = None  # ``columns`` as read (every grid of a large span)
    sources: tuple[tuple[int, int], ...] | None = None  # a profile's pooled (grid, version)
    windows: tuple[date, ...] | None = None  # a profile's budget windows (users are units)
    subjects: np.ndarray | None = None  # a profile's units' ledger subjects (units: ranks)

    @cached_property
    def columns(self) -> GridColumns:
        """The released grids' arrays one after the other (``pairs`` is ``occ.bounds``)."""
        return self.joined if self.joined is not None else GridColumns.of(self.arrays)


def plan_maker(
    inp: ReleaseInput, req: ReleaseRequest, excluded: np.ndarray | None
) -> Callable[[EpsilonAmount], SlotPlan]:
    """The plan at a given epsilon, with the ``excluded`` pairs left out."""
    opts = PlanOptions(
        clip_user=req.clip_user and not req.for_intervals,
        split=req.split,
        error_target=req.error_target,
        protect_min_error_grid=req.protect_min_error_grid,
    )
    return partial(plan_at, inp.occ, excluded, inp.dataset.value_bound, opts=opts)


def choose_plan(inp: ReleaseInput, req: ReleaseRequest, excluded: np.ndarray | None) -> SlotPlan:
    """The plan at the given epsilon, or at the largest one within ``max_user_cost``."""
    max_eps = inp.dataset.max_epsilon_per_query
    if req.for_intervals:
        return plan_for_intervals(
            inp.occ,
            excluded,
            inp.dataset.value_bound,
            eps=req.eps,
            cost_cap=req.cost_cap,
            max_epsilon=max_eps,
            n_statistics=req.n_statistics,
            useful_width=req.useful_width,
            rule=width_rule(req),
        )
    make = plan_maker(inp, req, excluded)
    if req.eps is not None:
        return make(req.eps)
    if req.cost_cap is None:  # a request has one of the two
        raise InvalidRequest("give epsilon or max_user_cost")
    live = inp.occ.user[live_pairs(inp.occ, excluded)]
    return plan_for_cost(make, req.cost_cap, max_eps, _grids_per_user(live))


def width_rule(req: ReleaseRequest) -> WidthRule:
    """The rule by which the request's cells are useful (its statistics' stated widths)."""
    return WidthRule(
        req.statistics, req.value_bound, req.mechanism, dict(req.options), req.useful_width
    )


def _grids_per_user(users: np.ndarray) -> int:
    """``G1`` of ``users``' pairs, at least 1 (a divisor of the cost)."""
    return max(grids_per_user(users), 1)


def make_input(
    dataset: Dataset,
    span: SpanGrids,
    grids: list[SlotGrid],
    arrays: list[GridArrays],
    covered: list[bool],
    fine: GridColumns,
    occ: Occupancy | None = None,
    joined: GridColumns | None = None,
    **more: Any,
) -> ReleaseInput:
    if occ is None:
        occ = Occupancy.of([a.user_ids for a in arrays], [a.counts for a in arrays])
    return ReleaseInput(
        dataset,
        span,
        grids,
        arrays,
        occ,
        coverage(fine, covered),
        len(span.grids) - sum(covered),
        joined,
        **more,
    )


def release_input(session: Session, req: ReleaseRequest) -> ReleaseInput:
    dataset = req.dataset
    span = span_grids(session, dataset, req.level, req.start, req.slots)
    fine = load_grid_batch(session, span.grids)
    if req.partition == "fixed":
        covered = [g.n_users >= req.min_users for g in span.grids]
        kept = [i for i, c in enumerate(covered) if c]
        grids, arrays = [span.grids[i] for i in kept], [fine.arrays[i] for i in kept]
        occ = fixed_occupancy(fine.columns, covered)
        joined = fine.joined if len(kept) == len(covered) else None
        return make_input(dataset, span, grids, arrays, covered, fine.columns, occ, joined)
    return _adaptive_input(session, req, span, fine)


def fixed_occupancy(cols: GridColumns, covered: Sequence[bool]) -> Occupancy:
    """The occupancy of the ``covered`` grids, from the span's columns."""
    inside = np.asarray(covered, dtype=bool)
    if inside.all():
        return Occupancy.of_columns(cols.user_ids, cols.counts, cols.sizes)
    pairs = np.repeat(inside, cols.sizes)
    return Occupancy.of_columns(cols.user_ids[pairs], cols.counts[pairs], cols.sizes[inside])


#: Chooses the released grids of a partition: ``(released cells, min_users)`` to grids.
Chooser = Callable[[dict[tuple[int, str], int]], AdaptiveGrids]


def _adaptive_input(
    session: Session, req: ReleaseRequest, span: SpanGrids, fine: GridBatch
) -> ReleaseInput:
    def chooser(released: dict[tuple[int, str], int]) -> AdaptiveGrids:
        return adaptive_grids(session, req.dataset, span, fine.arrays, released, req.min_users)

    return adaptive_over(req, span, fine.columns, chooser)


def adaptive_over(
    req: ReleaseRequest,
    span: SpanGrids,
    cols: GridColumns,
    chooser: Chooser,
    extra: dict[str, Any] | None = None,
) -> ReleaseInput:
    """The adaptive partition of ``span``'s fine grids (``cols``), its released grids made
    by ``chooser``; ``extra``: more fields of the input (a profile's)."""
    dataset, more = req.dataset, extra or {}
    trees = SpanTrees.of(span, cols, finest=span.h3_resolution, coarsest=req.coarsest_resolution)
    if req.for_intervals and req.cost_cap is not None:
        return _adaptive_for_intervals(req, span, cols, trees, chooser, more)
    n_stats = req.n_statistics
    if req.eps is not None:
        eps = float(req.eps.used) / n_stats
    else:
        eps = float(req.cost_cap or 0) / _grids_per_user(cols.user_ids) / n_stats
    seen: set[tuple[tuple[int, str], ...]] = set()
    inp: ReleaseInput | None = None
    for _ in range(ADAPTIVE_ROUNDS):
        released, covered = trees.choose(
            min_users=req.min_users,
            U=dataset.value_bound,
            eps=eps,
            useful_width=req.useful_width,
            statistics=req.statistics,
        )
        key = tuple(sorted(released))
        if key in seen:
            break
        seen.add(key)
        chosen = chooser(released)
        inp = make_input(dataset, span, chosen.grids, chosen.arrays, covered, cols, **more)
        if req.eps is not None or not inp.grids:
            break
        eps = float(choose_plan(inp, req, None).eps.used) / n_stats
    assert inp is not None
    return inp


def _adaptive_for_intervals(
    req: ReleaseRequest,
    span: SpanGrids,
    cols: GridColumns,
    trees: SpanTrees,
    chooser: Chooser,
    more: dict[str, Any],
) -> ReleaseInput:
    """The partition whose interval plan scores best over ``k`` = 1, 2, ...: each ``k``
    fixes ``ε = C/k``, the partition at that ``ε``, then the top-``k`` plan over it
    (docs/math.md §6.7). With per-cell ε (§6.10) each partition is also scored by its
    weighted plan keeping everyone, partitions are compared by the worth of their useful
    records (finer ones worth more: ``CHOICE_FINE_WEIGHT``; among those with at least
    ``USEFUL_KEPT`` of the most useful records), and two more are tried: the
    best ``k``'s partition again with the cells the finest candidates' plans made useful
    counted as useful. Public information only."""
    dataset = req.dataset
    cap = req.cost_cap or budget.limit(0)
    rule = width_rule(req)
    per_cell = "variance" not in req.statistics
    found: list[tuple[tuple[float, float], int, AdaptiveGrids, list[bool], frozenset, int]] = []

    def evaluate(k: int, useful: frozenset[tuple[int, str]] = frozenset()) -> bool:
        eps = min(budget.per_part(cap, k), dataset.max_epsilon_per_query)
        released, covered = trees.choose(
            min_users=req.min_users,
            U=dataset.value_bound,
            eps=float(eps) / req.n_statistics,
            useful_width=req.useful_width,
            statistics=req.statistics,
            useful=useful,
        )
        chosen = chooser(released)
        occ = Occupancy.of([a.user_ids for a in chosen.arrays], [a.counts for a in chosen.arrays])
        live = np.ones(occ.user.size, dtype=bool)
        max_eps = dataset.max_epsilon_per_query
        widths = CellWidths(rule, occ, float(min(cap, max_eps))) if per_cell else None
        args = (cap, max_eps, req.n_statistics, req.useful_width, widths)
        got = plan_at_k(occ, live, dataset.value_bound, k, *args)
        if got is None:
            return False
        last = _grids_per_user(occ.user)
        if widths is not None and last != k:  # per cell, keeping everyone
            alt = plan_at_k(occ, live, dataset.value_bound, last, *args)
            got = got if alt is None or alt[0] <= got[0] else alt
        score: tuple[float, float] = (float(got[0][0]), got[0][1])
        made: frozenset[tuple[int, str]] = frozenset()
        if widths is not None:
            worth, made = _worth(widths, got[1], chosen.grids, span.h3_resolution, req)
            score = (worth, got[0][1])
        found.append((score, k, chosen, covered, made, got[0][0]))
        return True

    for k in candidate_ks(_grids_per_user(cols.user_ids))[:ADAPTIVE_KS]:
        if not evaluate(k):
            break
    if not found:
        raise InvalidRequest(f"max_user_cost {cap} is too small for any per-grid epsilon")
    if per_cell:
        best_k = max(found, key=lambda f: f[0])[1]
        for made in [f[4] for f in found[:2] if f[4]]:
            evaluate(best_k, made)
        most = max(f[5] for f in found)  # finer, but never much less useful
        found = [f for f in found if f[5] >= USEFUL_KEPT * most]
    _, _, chosen, covered, _, _ = max(found, key=lambda f: f[0])
    return make_input(dataset, span, chosen.grids, chosen.arrays, covered, cols, **more)


def _worth(
    widths: CellWidths, plan: SlotPlan, grids: Sequence[SlotGrid], finest: int, req: ReleaseRequest
) -> tuple[float, frozenset[tuple[int, str]]]:
    """The plan's useful records, each worth ``1 + φ·(res - coarsest)/(finest - coarsest)``
    (``φ = CHOICE_FINE_WEIGHT``), and the (slot µs, cell) of its useful cells."""
    occ, coarsest = widths.occ, req.coarsest_resolution
    span = max(finest - coarsest, 1)
    worth, useful = 0.0, []
    for i, grid in enumerate(grids):
        caps = plan.caps(occ, i)
        if not caps.any():
            continue
        if widths.exact(i, caps, plan.grid_eps(i).used)[0] > widths.rule.useful_width:
            continue
        res = h3.get_resolution(grid.h3_cell)
        records = float(occ.count[occ.bounds[i] : occ.bounds[i + 1]].sum())
        worth += records * (1.0 + CHOICE_FINE_WEIGHT * (res - coarsest) / span)
        useful.append((datetime_to_us(grid.slot_start), grid.h3_cell))
    return worth, frozenset(useful)
