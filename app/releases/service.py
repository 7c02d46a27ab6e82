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
from typing import Any

import numpy as np
import orjson
from sqlalchemy.orm import Session

from app.core.noise.threads import in_parallel
from app.datasets.models import Dataset
from app.datasets.service import (
    get_dataset,
    parse_dataset_id,
)
from app.keys.service import KeyIdentity
from app.kit.errors import NotFound
from app.ledger import service as ledger
from app.ledger.rule import Verdict, refusal
from app.releases.charges import (
    ReleaseBudget,
    charge_release,
    release_budget,
    same_spends,
    with_privacy_unit,
)
from app.releases.draw import (
    draw_grids,
    grid_head,
    local_time,
    statistic_eps,
)
from app.releases.expected import expected_errors
from app.releases.formats import upgraded
from app.releases.inputs import ReleaseInput, choose_plan, plan_maker, release_input
from app.releases.models import GRIDS_SHAPE, SlotRelease, around_grids, with_grids_json
from app.releases.packing import pack
from app.releases.planning import (
    SlotPlan,
    largest_affordable,
    over_budget,
)
from app.releases.profile_input import profile_input
from app.releases.repository import ReleaseRepository
from app.releases.request import ReleaseRequest, parse_release
from app.releases.schemas import ReleaseIn
from app.releases.usefulness import Usefulness, usefulness, warnings

MAX_EXCLUSION_ROUNDS = 20


def _plan_within_budget(
    inp: ReleaseInput, req: ReleaseRequest, rb: ReleaseBudget, first: SlotPlan | None = None
) -> SlotPlan:
    """The plan every charged user can pay in each budget window (``app.releases.charges``);
    with ``on_exhausted=exclude`` a user who cannot pay in some window is left out of that
    window's grids only, and the plan is made again. ``first``: ``choose_plan(inp, req,
    None)`` if already made."""
    excluded: np.ndarray | None = None  # the (grid, user) pairs left out
    for _ in range(MAX_EXCLUSION_ROUNDS):
        reuse = excluded is None and first is not None
        plan = first if reuse and first is not None else choose_plan(inp, req, excluded)
        over = over_budget(rb.occ, plan, rb.accounts)  # (window, user) subjects
        if over.size == 0:
            return plan
        if inp.dataset.on_exhausted != "exclude":
            largest = largest_affordable(
                plan_maker(inp, req, excluded),
                rb.occ,
                plan,
                rb.accounts,
                inp.dataset.max_epsilon_per_query,
            )
            raise refusal(
                Verdict.EXHAUSTED, scope="these slots", over=int(rb.users(over).size),
                largest_epsilon=largest, release=True,
            )  # fmt: skip
        # left out of the grids of the windows where they cannot pay, kept elsewhere
        newly = rb.pairs_of(over)
        excluded = newly if excluded is None else excluded | newly
    raise refusal(
        Verdict.EXHAUSTED,
        scope=f"these slots after {MAX_EXCLUSION_ROUNDS} exclusions",
        release=True,
    )


def _fingerprint(inp: ReleaseInput, req: ReleaseRequest) -> str:
    grids = inp.sources
    if grids is None:
        grids = tuple((g.id, a.version) for g, a in zip(inp.grids, inp.arrays, strict=True))
    key = {
        "span": [inp.span.start.isoformat(), inp.span.end.isoformat()],
        "body": req.asked,
        "g": grids,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _usefulness(inp: ReleaseInput, req: ReleaseRequest, plan: SlotPlan) -> Usefulness:
    """The plan's usefulness from public expected widths (the preview's and release's)."""
    return usefulness(
        inp.arrays,
        inp.occ,
        plan,
        statistics=req.statistics,
        U=req.value_bound,
        eps=statistic_eps(plan, req.n_statistics).used
        if plan.weights is None
        else lambda i: statistic_eps(plan, req.n_statistics, i).used,
        mechanism=req.mechanism,
        options=req.options,
        useful_width=req.useful_width,
        total_records=inp.coverage.n_records,
    )


def _plan_fields(
    inp: ReleaseInput, req: ReleaseRequest, plan: SlotPlan, useful: Usefulness
) -> dict[str, Any]:
    dataset = inp.dataset
    profile = req.profile
    return {
        "dataset_id": dataset.id,
        "slot_start": local_time(dataset, inp.span.start)
        if profile is None
        else profile.time_of_day(0),
        "h3_resolution": inp.span.h3_resolution,
        "slot_minutes": inp.span.slot_minutes,
        "G1": plan.G1,
        "K": plan.K,
        "epsilon": float(plan.eps.charged),
        "max_user_cost": float(plan.max_cost),
        "slots": inp.span.slots,
        "partition": req.partition,
        "coarsest_resolution": req.asked.get("coarsest_resolution"),
        "profile": None if profile is None else profile.as_json(),
        "coverage": inp.coverage.as_json(),
        "useful": useful.as_json(),
        "warnings": warnings(
            useful,
            inp.occ,
            plan,
            coverage_records=inp.coverage.records,
            unit=dataset.value_unit,
            profile=profile is not None,
        ),
        "skipped_grids": inp.skipped,
        "statistics": list(req.statistics),
        "mechanism": req.mechanism,
        "objective": req.objective,
        "clip_user": req.clip_user,
        "min_users": req.min_users,
    }


# ------------------------------------------------------------------- release


def release_slot(
    session: Session, key: KeyIdentity, dataset_id: int | str, body: ReleaseIn
) -> tuple[dict[str, Any], bytes | None]:
    """The release's answer, and its grids' JSON as stored when they are to be sent in
    place of ``answer["grids"]`` (a new release: decoded in the answer too; a stored twin
    in today's shape: ``None`` there, :func:`_served_stored`). A stored twin is served
    instead of a new release, charging nothing."""
    dataset = ledger.lock_dataset(session, parse_dataset_id(dataset_id))
    req = parse_release(body, dataset)
    epoch = dataset.epoch
    inp = profile_input(session, req) if req.profile else release_input(session, req)
    fp = _fingerprint(inp, req)
    repo = ReleaseRepository(session)
    if (stored := repo.find(dataset.id, epoch, fp)) is not None:
        return _served_stored(stored, dataset)
    # planned (and refused) on the accounts as they read now, so a refusal creates none;
    # the first plan (public counts only) made meanwhile on the second thread
    read, first = in_parallel(
        lambda: release_budget(
            session,
            dataset,
            epoch,
            inp.grids,
            inp.occ,
            lock=False,
            windows=inp.windows,
        ),
        lambda: choose_plan(inp, req, None),
    )
    plan = _plan_within_budget(inp, req, read, first)
    if plan.K:
        ledger.check_quota(session, key, plan.max_cost)
    budget = release_budget(
        session, dataset, epoch, inp.grids, inp.occ, lock=True, windows=inp.windows,
        known=read.accounts,
    )  # fmt: skip
    if (stored := repo.find(dataset.id, epoch, fp)) is not None:
        return _served_stored(stored, dataset)
    if not same_spends(read, budget):  # spent meanwhile: planned again under the locks
        plan = _plan_within_budget(inp, req, budget)
    if plan.K:
        ledger.spend_quota(session, key, plan.max_cost)
    record = SlotRelease(
        public_id=uuid.uuid4().hex,
        dataset_id=dataset.id,
        epoch=epoch,
        slot_start=inp.span.start,
        fingerprint=fp,
        epsilon=plan.eps.charged,
        key_id=key.id,
    )
    # the draw (numpy and OpenDP, mostly outside the GIL) and the public widths at once
    (grids, kept), useful = in_parallel(
        lambda: draw_grids(
            inp.dataset, inp.grids, inp.arrays, inp.occ, req, plan, record.public_id, epoch,
            inp.columns,
        ),
        lambda: _usefulness(inp, req, plan),
    )  # fmt: skip
    charged_users = plan.user_costs(inp.occ)[0]
    answer = {
        "release_id": record.public_id,
        **_plan_fields(inp, req, plan, useful),
        "grids": grids,
        "withheld_grids": len(inp.grids) - len(grids),
        "n_users_charged": int(charged_users.size),
        "cached": False,
        "epoch": epoch,
    }
    grids_json = record.store(answer, kept)
    repo.add(record)
    charge_release(session, budget, plan, key, record.id)
    return answer, grids_json


# ------------------------------------------------------------------- preview


def preview_slot(session: Session, dataset_id: int | str, body: ReleaseIn) -> dict[str, Any]:
    """The plan of ``body`` without values and without any charge."""
    dataset = get_dataset(session, dataset_id)
    req = parse_release(body, dataset)
    inp = profile_input(session, req) if req.profile else release_input(session, req)
    # the accounts read while the plan (public counts only) is made on the second thread
    rb, plan = in_parallel(
        lambda: release_budget(
            session, dataset, dataset.epoch, inp.grids, inp.occ, lock=False, windows=inp.windows
        ),
        lambda: choose_plan(inp, req, None),
    )
    grids = []
    first = req.statistics[0]
    useful = _usefulness(inp, req, plan)
    all_widths = iter(useful.widths)
    all_caps = [plan.caps(inp.occ, i) for i in range(len(inp.grids))]
    errors_of = _expected_errors(inp, req, plan, all_caps)
    for i, grid in enumerate(inp.grids):
        caps = all_caps[i]
        n_kept = int(np.count_nonzero(caps))
        if not n_kept:
            continue
        errors = errors_of[i]
        widths = next(all_widths)
        grids.append(
            {
                **grid_head(dataset, grid, caps.size, caps.size - n_kept),
                "expected_error": errors[first],
                "expected_errors": errors,
                "expected_ci95_width": widths[first],
                "expected_ci95_widths": widths,
            }
        )
    return {
        **_plan_fields(inp, req, plan, useful),
        "grids": grids,
        "users_over_budget": int(rb.users(over_budget(rb.occ, plan, rb.accounts)).size),
        "largest_epsilon": largest_affordable(
            plan_maker(inp, req, None),
            rb.occ,
            plan,
            rb.accounts,
            dataset.max_epsilon_per_query,
        ),
    }


def _expected_errors(
    inp: ReleaseInput, req: ReleaseRequest, plan: SlotPlan, caps: list[np.ndarray]
) -> dict[int, dict[str, float]]:
    """Each kept grid's ``expected_error`` per statistic, the grids of one epsilon at once."""
    kept = [i for i, c in enumerate(caps) if c.any()]
    groups: dict[float, list[int]] = {}
    for i in kept:
        eps = statistic_eps(plan, req.n_statistics, i if plan.weights is not None else 0)
        groups.setdefault(eps.used, []).append(i)
    out: dict[int, dict[str, float]] = {i: {} for i in kept}
    for eps_used, members in groups.items():
        counts = [inp.arrays[i].counts for i in members]
        for s in req.statistics:
            got = expected_errors(
                s, counts, [caps[i] for i in members], inp.dataset.value_bound, eps_used,
                req.mechanism, **req.options,
            )  # fmt: skip
            for i, e in zip(members, got, strict=True):
                out[i][s] = e
    return out


# ------------------------------------------------------------------- stored


def release_json(session: Session, release_id: str) -> dict[str, Any]:
    """The stored release as API.md shows it (the other formats wrap this)."""
    stored, dataset = _stored(session, release_id)
    return _served(stored.answer(), dataset)


def release_json_bytes(session: Session, release_id: str) -> bytes:
    """:func:`release_json`'s JSON, by :func:`_served_stored`."""
    answer, grids_json = _served_stored(*_stored(session, release_id))
    return orjson.dumps(answer) if grids_json is None else with_grids_json(answer, grids_json)


def release_json_zstd(session: Session, release_id: str) -> bytes | None:
    """:func:`release_json_bytes`' JSON as zstd frames (``Content-Encoding: zstd``), the
    grids' frame sent as stored, never unpacked (a day: 13 MB, not 243); None for a
    release stored in an older shape."""
    stored, dataset = _stored(session, release_id)
    if stored.grids_shape != GRIDS_SHAPE:
        return None
    before, after = around_grids({**_served({**stored.head, "grids": []}, dataset), "grids": None})
    return b"".join((pack(before), stored.grids, pack(after)))


def _stored(session: Session, release_id: str) -> tuple[SlotRelease, Dataset]:
    if not isinstance(release_id, str) or not 1 <= len(release_id) <= 32:
        raise no_release(str(release_id))
    stored = ReleaseRepository(session).by_public_id(release_id)
    if stored is None:
        raise no_release(release_id)
    return stored, get_dataset(session, stored.dataset_id)


def no_release(release_id: str) -> NotFound:
    """The refusal of an id that names no release, saying where release ids come from."""
    return NotFound(
        f"no release {release_id[:40]!r}: GET /datasets/{{dataset_id}}/releases lists them"
    )


def _served_stored(stored: SlotRelease, dataset: Dataset) -> tuple[dict[str, Any], bytes | None]:
    """A stored release as served, and its grids' stored JSON when they are sent as
    stored: one in today's shape (``GRIDS_SHAPE``) is served from its head (``grids``:
    ``None``), its grids never decoded; an older one is decoded and upgraded."""
    if stored.grids_shape == GRIDS_SHAPE:
        head = _served({**stored.head, "grids": []}, dataset)
        return {**head, "grids": None}, stored.grids_json()
    return _served(stored.answer(), dataset), None


def _served(answer: dict[str, Any], dataset: Dataset) -> dict[str, Any]:
    """A stored release's answer as it is served, whichever path finds it: in today's
    shape (``privacy_unit``, the fields of :func:`formats.upgraded` and the defaults of
    ``slots``, ``partition``, ``profile``, ``useful`` (null: not known) and ``warnings``
    filled in for releases stored before them), marked
    ``cached``. The grids are new dicts (``with_privacy_unit`` copies them)."""
    upgraded_answer = upgraded(with_privacy_unit(answer, dataset))
    old = {"slots": 1, "partition": "fixed", "profile": None, "useful": None, "warnings": []}
    return {**old, **upgraded_answer, "cached": True}
