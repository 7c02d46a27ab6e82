"""Release every readable grid of a timeslot at once (Clip-User, docs/math.md §6.5).

The slot's grids (the dataset's own, or coarser ones made on demand) with at
least ``min_users`` users are released; the others are skipped and charge
nobody. The plan (``app.releases.planning``) is made from public occupancy only:
it fixes the per-grid epsilon (given, or the largest within ``max_user_cost``)
and each user's kept count per grid. Each statistic is then released per grid
with the requested mechanism on the kept records; users pay the per-grid epsilon
once per grid where they are kept. Plan, charges and the stored release share
one transaction. Analysts see suppressions as counts only; the ledger (admins)
keeps who was charged where.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app import budget, core
from app.answers.epsilon import EpsilonAmount, parse_epsilon
from app.answers.options import parse_options
from app.datasets.coarse import grid_level
from app.datasets.grid_store import GridArrays
from app.datasets.models import Dataset
from app.datasets.service import (
    get_dataset,
    load_grid_snapshots,
    parse_dataset_id,
    parse_slot_start,
)
from app.errors import BudgetExhausted, InvalidRequest, NotFound
from app.keys.service import KeyIdentity
from app.ledger import service as ledger
from app.ledger.repository import LedgerRepository
from app.releases.draw import (
    draw_grids,
    grid_head,
    local_time,
    mechanism_options,
    statistic_eps,
)
from app.releases.expected import expected_error
from app.releases.models import SlotRelease
from app.releases.planning import (
    Occupancy,
    PlanOptions,
    SlotPlan,
    largest_affordable,
    over_budget,
    plan_at,
    plan_for_cost,
)
from app.releases.repository import ReleaseRepository
from app.releases.schemas import ReleaseIn
from app.releases.slot import SlotGrids, slot_grids

MAX_EXCLUSION_ROUNDS = 20


@dataclass(frozen=True)
class SlotInput:
    """The grids to release and their occupancy."""

    dataset: Dataset
    slot: SlotGrids
    arrays: list[GridArrays]
    occ: Occupancy


def _check_statistics(body: ReleaseIn) -> None:
    for statistic in body.statistics:
        parse_options(statistic, body.mechanism, mechanism_options(body))


def _slot_input(session: Session, dataset: Dataset, body: ReleaseIn) -> SlotInput:
    _check_statistics(body)
    level = grid_level(dataset, body.h3_resolution, body.slot_minutes)
    slot = slot_grids(session, dataset, level, parse_slot_start(dataset, body.slot_start))
    released = [g for g in slot.grids if g.n_users >= body.min_users]
    slot = SlotGrids(slot.start, slot.level, released, len(slot.grids) - len(released))
    arrays = load_grid_snapshots(session, released)
    occ = Occupancy.of([a.user_ids for a in arrays], [a.counts for a in arrays])
    return SlotInput(dataset, slot, arrays, occ)


def _options(body: ReleaseIn) -> PlanOptions:
    return PlanOptions(
        clip_user=body.clip_user,
        split=body.split,
        error_target=body.error_target,
        protect_min_error_grid=body.protect_min_error_grid,
    )


def _maker(
    inp: SlotInput, body: ReleaseIn, excluded: np.ndarray
) -> Callable[[EpsilonAmount], SlotPlan]:
    """The plan at a given epsilon, with ``excluded`` users left out."""
    return partial(plan_at, inp.occ, excluded, inp.dataset.value_bound, opts=_options(body))


def _choose(inp: SlotInput, body: ReleaseIn, excluded: np.ndarray) -> SlotPlan:
    """The plan at the given epsilon, or at the largest one within ``max_user_cost``."""
    max_eps = inp.dataset.max_epsilon_per_query
    make = _maker(inp, body, excluded)
    if body.epsilon is not None:
        return make(parse_epsilon(body.epsilon, max_eps))
    if body.max_user_cost is None:  # the schema asks for one of the two
        raise InvalidRequest("give epsilon or max_user_cost")
    cap = budget.limit(body.max_user_cost)
    live = inp.occ.user[~np.isin(inp.occ.user, excluded)]
    G1 = int(np.unique(live, return_counts=True)[1].max()) if live.size else 1
    return plan_for_cost(make, cap, max_eps, G1)


def _remaining(dataset: Dataset, spent: dict[int, Decimal]) -> dict[int, Decimal]:
    return {u: budget.remaining(s, dataset.budget_per_user) for u, s in spent.items()}


def _plan_within_budget(inp: SlotInput, body: ReleaseIn, spent: dict[int, Decimal]) -> SlotPlan:
    """The plan every charged user can pay; with ``on_exhausted=exclude`` users who
    cannot are left out and the plan is made again."""
    excluded = np.empty(0, dtype=np.int64)
    cap = inp.dataset.budget_per_user
    remaining = _remaining(inp.dataset, spent)
    for _ in range(MAX_EXCLUSION_ROUNDS):
        plan = _choose(inp, body, excluded)
        over = over_budget(inp.occ, plan, spent, cap)
        if over.size == 0:
            return plan
        if inp.dataset.on_exhausted != "exclude":
            largest = largest_affordable(
                _maker(inp, body, excluded),
                inp.occ,
                plan,
                remaining,
                inp.dataset.max_epsilon_per_query,
            )
            raise BudgetExhausted(
                f"{over.size} user(s) of this timeslot would pass their privacy budget",
                largest_epsilon=largest,
            )
        excluded = np.union1d(excluded, over)
    raise BudgetExhausted("could not find users of this timeslot within their budget")


def _fingerprint(inp: SlotInput, body: ReleaseIn) -> str:
    key = {
        "slot": inp.slot.start.isoformat(),
        "body": body.model_dump(mode="json", exclude={"slot_start"}),
        "g": [(g.id, a.version) for g, a in zip(inp.slot.grids, inp.arrays, strict=True)],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _plan_fields(inp: SlotInput, body: ReleaseIn, plan: SlotPlan) -> dict[str, Any]:
    dataset, level = inp.dataset, inp.slot.level
    return {
        "dataset_id": dataset.id,
        "slot_start": local_time(dataset, inp.slot.start),
        "h3_resolution": dataset.h3_resolution if level is None else level.h3_resolution,
        "slot_minutes": dataset.timeslot_minutes if level is None else level.slot_minutes,
        "G1": plan.G1,
        "K": plan.K,
        "epsilon": float(plan.eps.charged),
        "max_user_cost": float(plan.max_cost),
        "skipped_grids": inp.slot.skipped,
        "statistics": list(body.statistics),
        "mechanism": body.mechanism,
        "objective": body.objective,
        "clip_user": body.clip_user,
        "min_users": body.min_users,
    }


# ------------------------------------------------------------------- release


def release_slot(
    session: Session, key: KeyIdentity, dataset_id: int | str, body: ReleaseIn
) -> dict[str, Any]:
    dataset = ledger.lock_dataset(session, parse_dataset_id(dataset_id))
    epoch = dataset.epoch
    inp = _slot_input(session, dataset, body)
    fp = _fingerprint(inp, body)
    repo = ReleaseRepository(session)
    if (stored := repo.find(dataset.id, epoch, fp)) is not None:
        return {**stored.answer, "cached": True}
    users = np.unique(inp.occ.user)
    budget = ledger.lock_budget(session, dataset, epoch, users)
    if (stored := repo.find(dataset.id, epoch, fp)) is not None:
        return {**stored.answer, "cached": True}

    plan = _plan_within_budget(inp, body, budget.spent)
    if plan.K:
        ledger.spend_quota(session, key, plan.max_cost)
    record = SlotRelease(
        public_id=uuid.uuid4().hex,
        dataset_id=dataset.id,
        epoch=epoch,
        slot_start=inp.slot.start,
        fingerprint=fp,
        epsilon=plan.eps.charged,
        answer={},
        kept={},
        key_id=key.id,
    )
    grids, kept = draw_grids(
        inp.dataset, inp.slot.grids, inp.arrays, inp.occ, body, plan, record.public_id, epoch
    )
    charged_users = plan.user_costs(inp.occ)[0]
    record.answer = {
        "release_id": record.public_id,
        **_plan_fields(inp, body, plan),
        "grids": grids,
        "withheld_grids": len(inp.slot.grids) - len(grids),
        "n_users_charged": int(charged_users.size),
        "cached": False,
        "epoch": epoch,
    }
    record.kept = kept
    repo.add(record)
    _charge(session, inp, plan, budget, key, record.id)
    return record.answer


def _charge(
    session: Session,
    inp: SlotInput,
    plan: SlotPlan,
    budget: ledger.LockedBudget,
    key: KeyIdentity,
    release_row_id: int,
) -> None:
    """Charge every kept user the per-grid epsilon once per grid where it is kept: one
    ledger entry per distinct number of grids (the stored release keeps, per grid, who
    was kept; admins only)."""
    users, n_grids = plan.user_costs(inp.occ)
    for k in np.unique(n_grids).tolist():
        ledger.charge(
            session,
            budget,
            users[n_grids == k].tolist(),
            plan.eps.charged * k,
            key_id=key.id,
            kind="release",
            reference_id=release_row_id,
            grid_id=None,
        )


# ------------------------------------------------------------------- preview


def preview_slot(session: Session, dataset_id: int | str, body: ReleaseIn) -> dict[str, Any]:
    """The plan of ``body`` without values and without any charge."""
    dataset = get_dataset(session, dataset_id)
    inp = _slot_input(session, dataset, body)
    plan = _choose(inp, body, np.empty(0, dtype=np.int64))
    users = np.unique(inp.occ.user)
    spent = LedgerRepository(session).spent(dataset.id, dataset.epoch, users.tolist())
    remaining = _remaining(dataset, spent)

    eps = statistic_eps(plan, len(body.statistics))
    grids = []
    U = dataset.value_bound
    for i, (grid, arrays) in enumerate(zip(inp.slot.grids, inp.arrays, strict=True)):
        caps = plan.caps(inp.occ, i)
        if not caps.any():
            continue
        opts = mechanism_options(body)
        errors = {
            s: expected_error(s, arrays.counts, U, eps.used, body.mechanism, caps=caps, **opts)
            for s in body.statistics
        }
        widths = {
            s: core.expected_ci95_width(
                s, arrays.counts, U, eps.used, body.mechanism, caps=caps, **opts
            )
            for s in body.statistics
        }
        grids.append(
            {
                **grid_head(dataset, grid, caps),
                "expected_error": errors[body.statistics[0]],
                "expected_errors": errors,
                "expected_ci95_width": widths[body.statistics[0]],
                "expected_ci95_widths": widths,
            }
        )
    return {
        **_plan_fields(inp, body, plan),
        "grids": grids,
        "users_over_budget": int(over_budget(inp.occ, plan, spent, dataset.budget_per_user).size),
        "largest_epsilon": largest_affordable(
            _maker(inp, body, np.empty(0, dtype=np.int64)),
            inp.occ,
            plan,
            remaining,
            dataset.max_epsilon_per_query,
        ),
    }


# ------------------------------------------------------------------- stored


def release_json(session: Session, release_id: str) -> dict[str, Any]:
    """The stored release as API.md shows it (the other formats wrap this)."""
    if not isinstance(release_id, str) or not 1 <= len(release_id) <= 32:
        raise NotFound("no such release")
    stored = ReleaseRepository(session).by_public_id(release_id)
    if stored is None:
        raise NotFound(f"no release {release_id[:40]!r}")
    return {**stored.answer, "cached": True}
