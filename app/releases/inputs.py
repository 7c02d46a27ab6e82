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
from dataclasses import dataclass, replace
from datetime import date
from functools import cached_property
from typing import Any

import h3
import numpy as np
from sqlalchemy.orm import Session

from app import budget
from app.answers.epsilon import EpsilonAmount
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
from app.releases.per_cell import WidthRule
from app.releases.planning import (
    LivePairs,
    Occupancy,
    Planned,
    PlanOptions,
    SlotPlan,
    draft_at,
    grids_per_user,
    live_pairs,
    plan_for_cost,
)
from app.releases.refine import Candidates, refine
from app.releases.request import ReleaseRequest
from app.releases.slot import SpanGrids, span_grids

ADAPTIVE_ROUNDS = 3
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

    @cached_property
    def columns(self) -> GridColumns:
        """The released grids' arrays one after the other (``pairs`` is ``occ.bounds``)."""
        return self.joined if self.joined is not None else GridColumns.of(self.arrays)


def plan_maker(
    inp: ReleaseInput, req: ReleaseRequest, excluded: np.ndarray | None
) -> Callable[[EpsilonAmount], SlotPlan]:
    """The plan at a given epsilon, with the ``excluded`` pairs left out."""
    draft = draft_maker(inp, req, excluded)
    return lambda eps: draft(eps).done()


def draft_maker(
    inp: ReleaseInput, req: ReleaseRequest, excluded: np.ndarray | None
) -> Callable[[EpsilonAmount], Planned]:
    """:func:`plan_maker`'s plans as drafts, finished when kept (a cost search's)."""
    opts = PlanOptions(
        clip_user=req.clip_user and not req.for_intervals,
        split=req.split,
        error_target=req.error_target,
        protect_min_error_grid=req.protect_min_error_grid,
    )
    made: list[LivePairs] = []  # read once, on the first plan asked

    def make(eps: EpsilonAmount) -> Planned:
        if not made:
            made.append(LivePairs.of(inp.occ, excluded))
        return draft_at(inp.occ, excluded, inp.dataset.value_bound, eps, opts, made[0])

    return make


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
    make = draft_maker(inp, req, excluded)
    if req.eps is not None:
        return make(req.eps).done()
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
    if (units := more.pop("subjects", None)) is not None:
        occ = replace(occ, units=units)
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
    """Each ``k`` = 1, 2, ... fixes ``ε = C/k`` and the partition at that ``ε``
    (docs/math.md §6.7). Equal plans only: the partition whose top-``k`` plan scores best.
    With per-cell ε (§6.10) those partitions are the starts of :func:`refine`, which
    chooses the cells with their allocation. Public information only."""
    dataset = req.dataset
    cap = req.cost_cap or budget.limit(0)
    max_eps = dataset.max_epsilon_per_query
    ks = candidate_ks(_grids_per_user(cols.user_ids))[:ADAPTIVE_KS]

    def partition(k: int) -> tuple[dict[tuple[int, str], int], list[bool]]:
        return trees.choose(
            min_users=req.min_users,
            U=dataset.value_bound,
            eps=float(min(budget.per_part(cap, k), max_eps)) / req.n_statistics,
            useful_width=req.useful_width,
            statistics=req.statistics,
        )

    if "variance" not in req.statistics:
        cands = Candidates.of(
            [(slot, tree) for slot, _, _, tree in trees.slots],
            min_users=req.min_users,
            rule=width_rule(req),
            cap=cap,
            max_epsilon=max_eps,
        )
        index = {key: i for i, key in enumerate(cands.keys)}
        starts = []
        for k in ks:
            released = partition(k)[0]
            starts.append([index[(s, h3.str_to_int(c))] for s, c in released])
        keys = [cands.keys[j] for j in refine(cands, starts)]
        released = {(s, h3.int_to_str(c)): h3.get_resolution(h3.int_to_str(c)) for s, c in keys}
        chosen = chooser(released)
        covered = trees.covered(released)
        return make_input(dataset, span, chosen.grids, chosen.arrays, covered, cols, **more)
    found: list[tuple[tuple[int, float], AdaptiveGrids, list[bool]]] = []
    for k in ks:
        released, covered = partition(k)
        chosen = chooser(released)
        occ = Occupancy.of([a.user_ids for a in chosen.arrays], [a.counts for a in chosen.arrays])
        live = np.ones(occ.user.size, dtype=bool)
        got = plan_at_k(occ, live, dataset.value_bound, k, cap, max_eps, req.n_statistics,
                        req.useful_width)  # fmt: skip
        if got is None:
            break
        found.append((got[0], chosen, covered))
    if not found:
        raise InvalidRequest(f"max_user_cost {cap} is too small for any per-grid epsilon")
    _, chosen, covered = max(found, key=lambda f: f[0])
    return make_input(dataset, span, chosen.grids, chosen.arrays, covered, cols, **more)
