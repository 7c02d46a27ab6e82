"""Release every grid of a timeslot at once (004 §V, docs/math.md §6.5).

Clip-User plans on the slot's public occupancy, then each grid gets the joint
clipped mean+variance release (004 ``M_clip``) with the plan's kept counts Γ and
pseudo-user bound m. Each user pays ``eps`` per grid where it is kept, so no one
pays more than ``K·eps``. Plan, charges and answers share one transaction.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app import core
from app.core import bounds
from app.core.clip_user import clip_user, plan_kept
from app.datasets.models import Dataset, Grid
from app.datasets.service import load_grid_snapshot, parse_dataset_id
from app.errors import BudgetExhausted, InvalidRequest, NotFound
from app.keys.service import KeyIdentity, spend_quota
from app.ledger import service as ledger
from app.queries.epsilon import EpsilonAmount, parse_epsilon
from app.queries.service import answer_body
from app.releases.models import SlotRelease
from app.releases.repository import ReleaseRepository
from app.releases.schemas import ReleaseIn

MAX_EXCLUSION_ROUNDS = 20


@dataclass(frozen=True)
class SlotPlan:
    G1: int
    K: int
    E: float
    E_bar: float
    caps: list[np.ndarray | None]  # per grid, Γ caps aligned with its users; None = withheld
    m: list[int | None]  # per grid pseudo-user bound (None: let the mechanism choose)
    removed: list[tuple[int, int]]  # (grid position, user id)


def _plan(arrays: list, excluded: set[int], U: float, eps: float, body: ReleaseIn) -> SlotPlan:
    pos, users, counts = [], [], []
    for g, a in enumerate(arrays):
        keep = np.fromiter((int(u) not in excluded for u in a.user_ids), bool, len(a.user_ids))
        pos.append(np.full(int(keep.sum()), g))
        users.append(a.user_ids[keep])
        counts.append(a.counts[keep])
    pos_a, users_a, counts_a = (np.concatenate(x).astype(np.int64) for x in (pos, users, counts))
    if users_a.size == 0:
        raise BudgetExhausted("every user of this timeslot has exhausted the privacy budget")
    live = set(pos_a.tolist())
    G1 = int(np.max(np.unique(users_a, return_counts=True)[1]))
    if body.clip_user:
        plan = clip_user(
            pos_a,
            users_a,
            counts_a,
            U,
            eps,
            error_target=body.error_target,
            protect_min_error_grid=body.protect_min_error_grid,
            split=body.split,
        )
        kept = np.asarray(plan_kept(plan, pos_a, users_a, counts_a))
        caps: list[np.ndarray | None] = []
        for g, a in enumerate(arrays):
            if g not in live:
                caps.append(None)
                continue
            by_user = dict(
                zip(users_a[pos_a == g].tolist(), kept[pos_a == g].tolist(), strict=True)
            )
            caps.append(
                np.fromiter((by_user.get(int(u), 0) for u in a.user_ids), np.int64, len(a.user_ids))
            )
        return SlotPlan(
            G1,
            plan.K,
            plan.E,
            plan.E_bar,
            caps,
            [plan.m.get(g) for g in range(len(arrays))],
            [(int(g), int(u)) for g, u in plan.removed],
        )
    caps = [
        None if g not in live else np.where(np.isin(a.user_ids, list(excluded)), 0, a.counts)
        for g, a in enumerate(arrays)
    ]
    E = max(
        bounds.joint_clip_error(
            U, eps, int(a.counts.max()), int(a.counts.sum()), int(a.counts.sum()), split=body.split
        )
        for g, a in enumerate(arrays)
        if g in live
    )
    return SlotPlan(G1, G1, E, float("nan"), caps, [None] * len(arrays), [])


def _user_costs(arrays: list, plan: SlotPlan) -> Counter:
    cost: Counter = Counter()
    for a, caps in zip(arrays, plan.caps, strict=True):
        if caps is not None:
            cost.update(int(u) for u in a.user_ids[caps > 0])
    return cost


def _fingerprint(
    slot: str, eps: EpsilonAmount, options: dict, grids: list[Grid], arrays: list
) -> str:
    key = {
        "slot": slot,
        "e": str(eps.charged),
        "o": options,
        "g": [(g.id, a.version) for g, a in zip(grids, arrays, strict=True)],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def release_slot(
    session: Session, key: KeyIdentity, dataset_id: int, body: ReleaseIn
) -> dict[str, Any]:
    dataset = ledger.lock_dataset(session, parse_dataset_id(dataset_id))
    epoch = dataset.epoch
    eps = parse_epsilon(body.epsilon, dataset.max_epsilon_per_query)
    if body.slot_start.tzinfo is None:
        raise InvalidRequest("slot_start needs a UTC offset, e.g. 2016-11-25T11:00:00-06:00")
    slot = body.slot_start.astimezone(UTC)
    repo = ReleaseRepository(session)
    grids = repo.grids_in_slot(dataset.id, slot)
    if not grids:
        raise NotFound(f"no grid of dataset {dataset.id} starts at {slot.isoformat()}")
    arrays = [load_grid_snapshot(session, g) for g in grids]
    options = body.model_dump(mode="json", exclude={"slot_start", "epsilon"})
    fp = _fingerprint(slot.isoformat(), eps, options, grids, arrays)
    if (stored := repo.find(dataset.id, epoch, fp)) is not None:
        return {**stored.answer, "cached": True}

    all_users = np.unique(np.concatenate([a.user_ids for a in arrays]))
    budget = ledger.lock_budget(session, dataset, epoch, all_users)
    if (stored := repo.find(dataset.id, epoch, fp)) is not None:
        return {**stored.answer, "cached": True}

    plan = _plan_within_budget(arrays, dataset, budget, eps, body)
    cost = _user_costs(arrays, plan)
    spend_quota(session, key, eps.charged * max(cost.values()))
    record = SlotRelease(
        public_id=uuid.uuid4().hex,
        dataset_id=dataset.id,
        epoch=epoch,
        slot_start=slot,
        fingerprint=fp,
        epsilon=eps.charged,
        answer={},
        kept={},
        key_id=key.id,
    )
    answer, kept = _release_grids(grids, arrays, plan, dataset, eps, body, epoch)
    hashes = repo.user_hashes([u for _, u in plan.removed])
    answer |= {
        "release_id": record.public_id,
        "slot_start": slot.isoformat(),
        "epsilon": float(eps.charged),
        "clip_user": body.clip_user,
        "G1": plan.G1,
        "K": plan.K,
        "E": plan.E,
        "E_bar": answer["E_bar"],
        "max_user_cost": float(eps.charged * max(cost.values())),
        "n_users_charged": len(cost),
        "cached": False,
        "epoch": epoch,
        "options": options,
        "removed": [(grids[g].public_id, hashes[u]) for g, u in plan.removed],
    }
    record.answer, record.kept = answer, kept
    repo.add(record)
    for g, a, caps in zip(grids, arrays, plan.caps, strict=True):
        if caps is not None:
            ledger.charge(
                session,
                budget,
                a.user_ids[caps > 0],
                eps.charged,
                key_id=key.id,
                kind="release",
                reference_id=record.id,
                grid_id=g.id,
            )
    return answer


def _plan_within_budget(
    arrays: list, dataset: Dataset, budget: ledger.LockedBudget, eps: EpsilonAmount, body: ReleaseIn
) -> SlotPlan:
    """Plan; with ``on_exhausted=exclude`` drop users who cannot pay and plan again."""
    excluded: set[int] = set()
    for _ in range(MAX_EXCLUSION_ROUNDS):
        try:
            plan = _plan(arrays, excluded, dataset.value_bound, eps.used, body)
        except ValueError as exc:
            raise InvalidRequest(f"cannot plan this release: {exc}") from exc
        over = {
            u
            for u, k in _user_costs(arrays, plan).items()
            if budget.spent[u] + eps.charged * k > budget.cap
        }
        if not over:
            return plan
        if dataset.on_exhausted != "exclude":
            raise BudgetExhausted(f"{len(over)} user(s) of this timeslot would pass their budget")
        excluded |= over
    raise BudgetExhausted("could not find users of this timeslot within their budget")


def _release_grids(
    grids: list[Grid],
    arrays: list,
    plan: SlotPlan,
    dataset: Dataset,
    eps: EpsilonAmount,
    body: ReleaseIn,
    epoch: int,
) -> tuple[dict, dict]:
    out, kept, withheld, errors = [], {}, [], []
    for g, a, caps, m in zip(grids, arrays, plan.caps, plan.m, strict=True):
        if caps is None:
            withheld.append(g.public_id)
            continue
        mean, var = core.release_joint(
            a.grid, dataset.value_bound, eps.used, "clip", split=body.split, caps=caps, m=m
        )
        errors.append(float(mean.details.get("joint_error", np.nan)))
        opts = {"release": True}
        out.append(
            {
                "grid_id": g.public_id,
                "h3_cell": g.h3_cell,
                "mean": answer_body(g, "mean", "clip", eps, opts, mean, epoch),
                "variance": answer_body(g, "variance", "clip", eps, opts, var, epoch),
            }
        )
        kept[g.public_id] = {
            "version": a.version,
            "users": {
                str(int(u)): int(k) for u, k in zip(a.user_ids, mean.kept, strict=True) if k > 0
            },
        }
    e_bar = plan.E_bar if body.clip_user else max(errors)
    return {"grids": out, "withheld": withheld, "E_bar": e_bar}, kept
