"""Answering one DP statistic of one grid, charged before the answer leaves (the steps:
docs/architecture.md, "A query"). Only an ``ok`` commit returns the fresh answer. A release
whose commit fails is discarded unseen, and a retry draws fresh noise (except on a grid's first
query, whose release is committed again once its users' accounts exist: the only thing that
failed was their absence, a public fact).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from anyio import to_thread
from sqlalchemy.orm import Session

from app import budget, core
from app.answers.body import answer_body
from app.answers.epsilon import MIN_EPSILON, EpsilonAmount, check_max_epsilon, parse_epsilon
from app.answers.options import parse_options
from app.datasets.grid_store import GridArrays, GridChanged
from app.datasets.service import get_dataset, get_grid_by_public_id, load_grid_snapshot, no_grid
from app.keys.service import KeyIdentity
from app.kit.errors import BudgetExhausted, Conflict, InvalidRequest, NotFound, Unavailable
from app.ledger.committer import Committed
from app.ledger.rule import Verdict, refusal
from app.observability.metrics import record_charge
from app.queries.refusal import budget_refusal
from app.queries.repository import AnswerRecord, GridContext
from app.queries.store import QueryStore
from app.releases.repository import ReleaseRepository

GRID_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")  # opaque, URL-safe grid ids
RESERVED_PARAMS = frozenset({"epsilon", "mechanism"})
#: commits that found the epoch moved on, accounts missing or (``exclude``) a user
#: newly exhausted look again; past this many (an epoch changing again and again) the
#: client is asked to retry.
MAX_ATTEMPTS = 5
#: ``exclude`` datasets: attempts that read who is exhausted without a lock before the
#: query locks its users' accounts first (:func:`_release_under_lock`).
OPTIMISTIC_ATTEMPTS = 2
#: grids with more records than this are released on a worker thread.
RELEASE_ON_LOOP_MAX_RECORDS = 20_000


def fingerprint(
    statistic: str, mechanism: str, eps: EpsilonAmount, options: Mapping[str, Any]
) -> str:
    """Identifies a query within one grid version and epoch (stored beside both)."""
    key = {
        "s": statistic,
        "m": mechanism,
        "e": str(eps.charged),
        "o": dict(sorted(options.items())),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _cached(stored: Mapping[str, Any], ctx: GridContext) -> dict[str, Any]:
    # answers stored before privacy_unit or unit existed get them filled in
    return {"privacy_unit": ctx.privacy_unit, "unit": ctx.value_unit, **stored, "cached": True}


def _parse_query(
    statistic: str, mechanism: str, epsilon: float, raw_options: Mapping[str, str]
) -> tuple[EpsilonAmount, dict[str, Any]]:
    raw = dict(raw_options)
    plan_id = raw.pop("plan", None)
    eps = parse_epsilon(epsilon)
    options = parse_options(statistic, mechanism, raw)
    return eps, options if plan_id is None else {**options, "plan": plan_id}


async def answer_statistic(
    store: QueryStore,
    key: KeyIdentity,
    grid_public_id: str,
    statistic: str,
    mechanism: str,
    epsilon: float,
    raw_options: Mapping[str, str],
) -> dict[str, Any]:
    invalid: InvalidRequest | None
    mechanism = core.canonical_mechanism(mechanism)
    try:
        eps, options = _parse_query(statistic, mechanism, epsilon, raw_options)
    except InvalidRequest as exc:  # reported after "no such grid", as ever
        invalid, fp = exc, ""
    else:
        invalid, fp = None, fingerprint(statistic, mechanism, eps, options)
    if not GRID_ID.fullmatch(grid_public_id):
        raise no_grid(grid_public_id)
    ctx = None if invalid is not None else store.known.unasked(grid_public_id, fp)
    if ctx is not None:  # a query new to this process: released without a look-up
        fresh = await _answer_unlooked(store, ctx, key, statistic, mechanism, eps, options, fp)
        if fresh is not None:
            return fresh
    for attempt in range(MAX_ATTEMPTS):
        found = await store.lookup(grid_public_id, fp)
        if found is None:
            raise no_grid(grid_public_id)
        if invalid is not None:
            raise invalid
        ctx, stored = found
        check_max_epsilon(eps, ctx.max_epsilon_per_query)
        if stored is not None:  # the same query in this epoch and grid version: free
            return _cached(stored, ctx)
        try:
            arrays = await store.snapshot(ctx)
        except GridChanged:  # an upload committed since the look-up: look again
            continue
        plan_id = options.get("plan")  # its Γ caps: users it suppressed are not charged again
        step = ReleaseStep(
            ctx=ctx,
            key=key,
            statistic=statistic,
            mechanism=mechanism,
            eps=eps,
            options=options,
            fingerprint=fp,
            arrays=arrays,
            caps=None if plan_id is None else await store.run(_plan_caps, plan_id, ctx, arrays),
        )
        try:
            if ctx.on_exhausted == "exclude" and attempt >= OPTIMISTIC_ATTEMPTS:
                done = await _release_under_lock(store, step)
                if done is None:  # the epoch moved on: look again
                    continue
                answer, outcome = done
            else:
                answer, outcome = await _release_optimistic(store, step)
        except BudgetExhausted:  # every user exhausted (exclude): with largest_epsilon
            raise await budget_refusal(store, ctx, key, arrays.user_ids, over=0) from None
        served = await _verdict_answer(store, ctx, key, arrays, eps, answer, outcome)
        if served is not None:
            return served
        # stale epoch, accounts still missing, or a user newly exhausted (exclude): look again
    raise Unavailable("the grid or its budget epoch kept changing during this query; retry")


async def _answer_unlooked(
    store: QueryStore,
    ctx: GridContext,
    key: KeyIdentity,
    statistic: str,
    mechanism: str,
    eps: EpsilonAmount,
    options: dict[str, Any],
    fp: str,
) -> dict[str, Any] | None:
    """The query released on the grid's remembered context and committed by the statement
    that checks it still holds (``app.queries.known``); ``None``: look it up (a context
    moved on, or anything the look-up path decides first)."""
    if ctx.on_exhausted == "exclude" or "plan" in options:
        return None
    if eps.charged > ctx.max_epsilon_per_query:
        return None
    try:
        arrays = await store.snapshot(ctx)
    except GridChanged:
        store.known.forget(ctx.public_id)
        return None
    step = ReleaseStep(ctx=ctx, key=key, statistic=statistic, mechanism=mechanism, eps=eps,
                       options=options, fingerprint=fp, arrays=arrays, caps=None)  # fmt: skip
    answer, outcome = await _release_optimistic(store, step)
    served = await _verdict_answer(store, ctx, key, arrays, eps, answer, outcome)
    if served is None:
        store.known.forget(ctx.public_id)  # stale: the grid or the epoch moved on
    return served


async def _verdict_answer(
    store: QueryStore,
    ctx: GridContext,
    key: KeyIdentity,
    arrays: GridArrays,
    eps: EpsilonAmount,
    answer: dict[str, Any],
    outcome: Committed,
) -> dict[str, Any] | None:
    """What a commit's verdict answers: the fresh answer (charged), the stored twin, or a
    refusal raised; ``None``: look again (a stale epoch or version, accounts missing, or a
    user newly exhausted on an ``exclude`` dataset)."""
    verdict = outcome.verdict
    if verdict is Verdict.OK:
        record_charge(ctx.dataset_id, "query", eps.charged)
        return answer
    if verdict is Verdict.TWIN:
        return _cached(outcome.stored or {}, ctx)
    if verdict is Verdict.QUOTA or (verdict is Verdict.EXHAUSTED and ctx.on_exhausted != "exclude"):
        raise await budget_refusal(store, ctx, key, arrays.user_ids, verdict)
    return None
    return None


def _without_exhausted(
    exhausted: np.ndarray, arrays: GridArrays, caps: np.ndarray | None
) -> np.ndarray | None:
    """``exclude`` datasets: Γ caps with 0 for the users the ledger shows exhausted
    (ledger only, never values; docs/math.md §10.1)."""
    if not exhausted.any():
        return caps
    if exhausted.all():
        raise refusal(Verdict.EXHAUSTED, scope="this grid", over=0)
    return np.where(exhausted, 0, arrays.counts if caps is None else caps)


async def _release_optimistic(
    store: QueryStore, step: ReleaseStep
) -> tuple[dict[str, Any], Committed]:
    """Release, then commit (the commit re-checks everything under its locks): who is
    exhausted is read without a lock, so a user may run out meanwhile (``exhausted``)."""
    ctx, arrays = step.ctx, step.arrays
    if ctx.on_exhausted == "exclude":
        exhausted = await store.exhausted(ctx, arrays.user_ids, step.eps.charged)
        step = replace(step, caps=_without_exhausted(exhausted, arrays, step.caps))
    # A small grid's release (well under a millisecond) runs right here; a large
    # one's would stall every request of this process, so it goes to a thread.
    small = arrays.values.size <= RELEASE_ON_LOOP_MAX_RECORDS
    answer, record, users = step.run() if small else await to_thread.run_sync(step.run)
    outcome = await store.commit(ctx, step.key, record, users)
    if outcome.verdict is Verdict.MISSING:  # a grid's first query: its users' accounts
        # are created (committed on their own), then the same unseen release is committed
        await store.ensure_accounts(ctx, users)
        outcome = await store.commit(ctx, step.key, record, users)
    return answer, outcome


async def _release_under_lock(
    store: QueryStore, step: ReleaseStep
) -> tuple[dict[str, Any], Committed] | None:
    """``exclude`` datasets after optimistic attempts lost to users running out one
    after another (a burst): lock the grid's accounts first (queued fairly by Postgres
    behind the charges holding them), read who is exhausted, release and commit in that
    transaction, so no user can run out between the reading and the charge.
    ``None``: the epoch moved on."""
    ctx, arrays = step.ctx, step.arrays
    everyone = arrays.user_ids.tolist()
    await store.ensure_accounts(ctx, everyone)
    async with store.locked(ctx, everyone) as spent:
        if spent is None:
            return None
        exhausted = budget.exhausted(spent, arrays.user_ids, step.eps.charged, ctx.budget_per_user)
        step = replace(step, caps=_without_exhausted(exhausted, arrays, step.caps))
        # on the loop even when large: a worker thread may be held by a request waiting
        # for these very locks
        answer, record, users = step.run()
        outcome = await store.commit(ctx, step.key, record, users)
    return answer, outcome


@dataclass(frozen=True, kw_only=True)
class ReleaseStep:
    """Everything one fresh release of one grid needs (all decided before it runs)."""

    ctx: GridContext
    key: KeyIdentity
    statistic: str
    mechanism: str
    eps: EpsilonAmount
    options: dict[str, Any]
    fingerprint: str
    arrays: GridArrays
    caps: np.ndarray | None

    def run(self) -> tuple[dict[str, Any], AnswerRecord, list[int]]:
        """The fresh answer, its record to store, and the users to charge (not yet
        charged). The answer uses, and charges the users of, exactly this snapshot; its
        version is stored with it (an upload committing meanwhile is harmless)."""
        ctx, eps, options, arrays = self.ctx, self.eps, self.options, self.arrays
        engine_options = {k: v for k, v in options.items() if k != "plan"}
        release = _release(
            self.statistic, arrays, ctx, eps, self.mechanism, engine_options, self.caps
        )
        answer = answer_body(
            ctx,
            self.statistic,
            self.mechanism,
            eps,
            options,
            release,
            ctx.epoch,
            privacy_unit=ctx.privacy_unit,
            unit=ctx.value_unit,
            where=ctx.where(),
        )
        record = AnswerRecord(
            public_id=answer["query_id"],
            dataset_id=ctx.dataset_id,
            grid_id=ctx.id,
            epoch=ctx.epoch,
            grid_version=arrays.version,
            fingerprint=self.fingerprint,
            statistic=self.statistic,
            mechanism=release.mechanism,
            epsilon=eps.charged,
            options=options,
            answer=answer,
            key_id=self.key.id,
        )
        return answer, record, arrays.user_ids[release.kept > 0].tolist()


def _plan_caps(session: Session, plan_id: str, grid: GridContext, arrays: GridArrays) -> np.ndarray:
    """Γ caps from a stored slot release, so its suppressed users are not charged again."""
    stored = ReleaseRepository(session).by_public_id(plan_id, grids=False)
    if stored is None or stored.dataset_id != grid.dataset_id:
        raise NotFound(
            f"no release {plan_id!r} of this dataset: plan= takes a release_id of "
            "GET /datasets/{dataset_id}/releases"
        )
    kept = stored.kept_caps(grid.public_id, arrays.user_ids)
    if kept is None:
        raise InvalidRequest(f"release {plan_id} did not release grid {grid.public_id}")
    version, caps = kept
    if version != arrays.version:
        raise Conflict(f"grid {grid.public_id} changed since release {plan_id}; plan again")
    return caps


def _release(
    statistic: str,
    arrays,
    ctx: GridContext,
    eps: EpsilonAmount,
    mechanism: str,
    options: dict[str, Any],
    caps: np.ndarray | None,
) -> core.Release:
    try:
        return core.release(
            statistic, arrays.grid, ctx.value_bound, eps.used, mechanism, caps=caps, **options
        )
    except ValueError as exc:
        raise InvalidRequest(f"cannot release this statistic: {exc}") from exc


def quote(session: Session, grid_public_id: str, statistic: str, target_error: float) -> dict:
    """Smallest epsilon whose worst-case error reaches ``target_error`` (public counts only)."""
    grid = get_grid_by_public_id(session, grid_public_id)
    dataset = get_dataset(session, grid.dataset_id)
    arrays = load_grid_snapshot(session, grid)
    max_eps = float(dataset.max_epsilon_per_query)
    return quote_answer(
        grid.public_id, statistic, target_error, arrays.counts, dataset.value_bound, max_eps
    )


def quote_answer(
    grid_id: str, statistic: str, target_error: float, counts: Any, U: float, max_eps: float
) -> dict[str, Any]:
    """The quote of a grid with these public ``counts`` (also the OpenAPI example's)."""
    limits = {"max_epsilon": max_eps, "min_epsilon": float(MIN_EPSILON)}
    try:
        found = core.quote_epsilon(counts, U, target_error, statistic, **limits)
        auto_eps = core.auto_epsilon(statistic, counts, U, target_error, **limits)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    return {
        "grid_id": grid_id,
        "statistic": statistic,
        "target_error": target_error,
        "achievable": found is not None,
        "epsilon": None if found is None else float(found[0]),
        "mechanism": None if found is None else found[1],
        "auto_epsilon": auto_eps,
        "max_epsilon_per_query": max_eps,
    }
