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
from functools import cached_property, partial

import numpy as np
from sqlalchemy.orm import Session

from app import budget
from app.answers.epsilon import EpsilonAmount, parse_epsilon
from app.answers.options import parse_options
from app.datasets.coarse import grid_level
from app.datasets.grid_batch import GridBatch, GridColumns, load_grid_batch
from app.datasets.grid_store import GridArrays, SlotGrid
from app.datasets.models import Dataset
from app.datasets.service import parse_slot_start
from app.kit.errors import InvalidRequest
from app.releases.adaptive import (
    DEFAULT_LEVELS,
    AdaptiveGrids,
    Coverage,
    SpanTrees,
    adaptive_grids,
    coverage,
)
from app.releases.draw import mechanism_options
from app.releases.interval_plan import candidate_ks, plan_at_k, plan_for_intervals
from app.releases.planning import (
    Occupancy,
    PlanOptions,
    SlotPlan,
    grids_per_user,
    live_pairs,
    plan_at,
    plan_for_cost,
)
from app.releases.schemas import ReleaseIn
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

    @cached_property
    def columns(self) -> GridColumns:
        """The released grids' arrays one after the other (``pairs`` is ``occ.bounds``)."""
        return self.joined if self.joined is not None else GridColumns.of(self.arrays)


def plans_for_intervals(body: ReleaseIn) -> bool:
    """Whether users are suppressed for useful intervals (docs/math.md §6.7) rather than
    by Clip-User's error rule: ``auto`` with ``objective: interval`` and ``clip_user``."""
    return body.mechanism == "auto" and body.objective == "interval" and body.clip_user


def plan_maker(
    inp: ReleaseInput, body: ReleaseIn, excluded: np.ndarray | None
) -> Callable[[EpsilonAmount], SlotPlan]:
    """The plan at a given epsilon, with the ``excluded`` pairs left out."""
    opts = PlanOptions(
        clip_user=body.clip_user and not plans_for_intervals(body),
        split=body.split,
        error_target=body.error_target,
        protect_min_error_grid=body.protect_min_error_grid,
    )
    return partial(plan_at, inp.occ, excluded, inp.dataset.value_bound, opts=opts)


def choose_plan(inp: ReleaseInput, body: ReleaseIn, excluded: np.ndarray | None) -> SlotPlan:
    """The plan at the given epsilon, or at the largest one within ``max_user_cost``."""
    max_eps = inp.dataset.max_epsilon_per_query
    if plans_for_intervals(body):
        given = None if body.epsilon is None else parse_epsilon(body.epsilon, max_eps)
        cap = None if body.max_user_cost is None else budget.limit(body.max_user_cost)
        return plan_for_intervals(
            inp.occ,
            excluded,
            inp.dataset.value_bound,
            eps=given,
            cost_cap=cap,
            max_epsilon=max_eps,
            n_statistics=len(body.statistics),
        )
    make = plan_maker(inp, body, excluded)
    if body.epsilon is not None:
        return make(parse_epsilon(body.epsilon, max_eps))
    if body.max_user_cost is None:  # the schema asks for one of the two
        raise InvalidRequest("give epsilon or max_user_cost")
    cap = budget.limit(body.max_user_cost)
    live = inp.occ.user[live_pairs(inp.occ, excluded)]
    return plan_for_cost(make, cap, max_eps, _grids_per_user(live))


def _grids_per_user(users: np.ndarray) -> int:
    """``G1`` of ``users``' pairs, at least 1 (a divisor of the cost)."""
    return max(grids_per_user(users), 1)


def _input(
    dataset: Dataset,
    span: SpanGrids,
    grids: list[SlotGrid],
    arrays: list[GridArrays],
    covered: list[bool],
    fine: GridColumns,
    occ: Occupancy | None = None,
    joined: GridColumns | None = None,
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
    )


def release_input(session: Session, dataset: Dataset, body: ReleaseIn) -> ReleaseInput:
    for statistic in body.statistics:
        parse_options(statistic, body.mechanism, mechanism_options(body))
    level = grid_level(dataset, body.h3_resolution, body.slot_minutes)
    start = parse_slot_start(dataset, body.slot_start)
    span = span_grids(session, dataset, level, start, body.slots)
    fine = load_grid_batch(session, span.grids)
    if body.partition == "fixed":
        if body.coarsest_resolution is not None:
            raise InvalidRequest('coarsest_resolution applies to "partition": "adaptive" only')
        covered = [g.n_users >= body.min_users for g in span.grids]
        kept = [i for i, c in enumerate(covered) if c]
        grids, arrays = [span.grids[i] for i in kept], [fine.arrays[i] for i in kept]
        occ = _fixed_occupancy(fine.columns, covered)
        joined = fine.joined if len(kept) == len(covered) else None
        return _input(dataset, span, grids, arrays, covered, fine.columns, occ, joined)
    return _adaptive_input(session, dataset, body, span, fine)


def _fixed_occupancy(cols: GridColumns, covered: Sequence[bool]) -> Occupancy:
    """The occupancy of the ``covered`` grids, from the span's columns."""
    inside = np.asarray(covered, dtype=bool)
    if inside.all():
        return Occupancy.of_columns(cols.user_ids, cols.counts, cols.sizes)
    pairs = np.repeat(inside, cols.sizes)
    return Occupancy.of_columns(cols.user_ids[pairs], cols.counts[pairs], cols.sizes[inside])


def _adaptive_input(
    session: Session,
    dataset: Dataset,
    body: ReleaseIn,
    span: SpanGrids,
    fine: GridBatch,
) -> ReleaseInput:
    finest = span.h3_resolution
    coarsest = body.coarsest_resolution
    if coarsest is None:
        coarsest = max(0, finest - DEFAULT_LEVELS)
    if coarsest > finest:
        raise InvalidRequest(
            f"coarsest_resolution {coarsest} is finer than the release's h3_resolution "
            f"{finest}: give one between 0 and {finest}"
        )
    trees = SpanTrees.of(span, fine.columns, finest=finest, coarsest=coarsest)
    if plans_for_intervals(body) and body.max_user_cost is not None:
        return _adaptive_for_intervals(session, dataset, body, span, fine, trees)
    n_stats = len(body.statistics)
    if body.epsilon is not None:
        eps = float(parse_epsilon(body.epsilon, dataset.max_epsilon_per_query).used) / n_stats
    else:
        eps = float(body.max_user_cost or 0) / _grids_per_user(fine.columns.user_ids) / n_stats
    seen: set[tuple[tuple[int, str], ...]] = set()
    inp: ReleaseInput | None = None
    for _ in range(ADAPTIVE_ROUNDS):
        released, covered = trees.choose(min_users=body.min_users, U=dataset.value_bound, eps=eps)
        key = tuple(sorted(released))
        if key in seen:
            break
        seen.add(key)
        chosen = adaptive_grids(session, dataset, span, fine.arrays, released, body.min_users)
        inp = _input(dataset, span, chosen.grids, chosen.arrays, covered, fine.columns)
        if body.epsilon is not None or not inp.grids:
            break
        eps = float(choose_plan(inp, body, None).eps.used) / n_stats
    assert inp is not None
    return inp


def _adaptive_for_intervals(
    session: Session,
    dataset: Dataset,
    body: ReleaseIn,
    span: SpanGrids,
    fine: GridBatch,
    trees: SpanTrees,
) -> ReleaseInput:
    """The partition whose interval plan scores best over ``k`` = 1, 2, ...: each ``k``
    fixes ``ε = C/k``, the partition at that ``ε``, then the top-``k`` plan over it
    (docs/math.md §6.7). Public information only."""
    cap = budget.limit(body.max_user_cost or 0)
    n_stats = len(body.statistics)
    U = dataset.value_bound
    best: tuple[tuple[int, float], AdaptiveGrids, list[bool]] | None = None
    for k in candidate_ks(_grids_per_user(fine.columns.user_ids))[:ADAPTIVE_KS]:
        eps = min(budget.per_part(cap, k), dataset.max_epsilon_per_query)
        released, covered = trees.choose(min_users=body.min_users, U=U, eps=float(eps) / n_stats)
        chosen = adaptive_grids(session, dataset, span, fine.arrays, released, body.min_users)
        occ = Occupancy.of([a.user_ids for a in chosen.arrays], [a.counts for a in chosen.arrays])
        live = np.ones(occ.user.size, dtype=bool)
        got = plan_at_k(occ, live, U, k, cap, dataset.max_epsilon_per_query, n_stats)
        if got is None:
            break
        if best is None or got[0] > best[0]:
            best = (got[0], chosen, covered)
    if best is None:
        raise InvalidRequest(f"max_user_cost {cap} is too small for any per-grid epsilon")
    _, chosen, covered = best
    return _input(dataset, span, chosen.grids, chosen.arrays, covered, fine.columns)
