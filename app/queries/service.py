"""Answering one DP statistic of one grid, charged in the same transaction.

Order of work (all inside the request's transaction, committed before the
answer is sent): lock the dataset epoch → serve a stored identical answer if
any → lock every account of the grid's users → decide who is exhausted (ledger
only) → plan from public counts → check the key's quota → release with the
vetted sampler → store answer and charge.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app import core
from app.datasets.models import Dataset, Grid
from app.datasets.service import get_dataset, get_grid_by_public_id, load_grid_snapshot
from app.errors import BudgetExhausted, Conflict, InvalidRequest, NotFound
from app.keys.service import KeyIdentity, spend_quota
from app.ledger import service as ledger
from app.queries.epsilon import MIN_EPSILON, EpsilonAmount, parse_epsilon
from app.queries.models import QueryAnswer
from app.queries.repository import AnswerRepository
from app.releases.repository import ReleaseRepository

STATISTICS = ("mean", "variance")
GRID_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")  # opaque, URL-safe grid ids
RESERVED_PARAMS = frozenset({"epsilon", "mechanism"})


def mechanisms_for(statistic: str) -> Mapping[str, Any]:
    return core.MEAN_MECHANISMS if statistic == "mean" else core.VARIANCE_MECHANISMS


def parse_options(statistic: str, mechanism: str, raw: Mapping[str, str]) -> dict[str, Any]:
    """Validate the mechanism name and its options (unknown ones are 400)."""
    known = mechanisms_for(statistic)
    if mechanism not in known:
        raise InvalidRequest(
            f"unknown {statistic} mechanism {mechanism!r}; use one of {', '.join(sorted(known))}"
        )
    try:
        return core.validate_options(statistic, mechanism, dict(raw))
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc


def fingerprint(
    statistic: str,
    mechanism: str,
    eps: EpsilonAmount,
    options: Mapping[str, Any],
    grid_version: int,
) -> str:
    key = {
        "s": statistic,
        "m": mechanism,
        "e": str(eps.charged),
        "o": dict(sorted(options.items())),
        "v": grid_version,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _grid_and_dataset(session: Session, public_id: str) -> tuple[Grid, Dataset]:
    found = None
    if GRID_ID.fullmatch(public_id):
        found = AnswerRepository(session).grid_and_dataset(public_id)
    if found is None:
        raise NotFound(f"no grid {public_id!r}")
    return found


def _cached(stored: QueryAnswer) -> dict[str, Any]:
    return {**stored.answer, "cached": True}


def answer_statistic(
    session: Session,
    key: KeyIdentity,
    grid_public_id: str,
    statistic: str,
    mechanism: str,
    epsilon: float,
    raw_options: Mapping[str, str],
) -> dict[str, Any]:
    grid, dataset = _grid_and_dataset(session, grid_public_id)
    eps = parse_epsilon(epsilon, dataset.max_epsilon_per_query)
    raw_options = dict(raw_options)
    plan_id = raw_options.pop("plan", None)
    options = parse_options(statistic, mechanism, raw_options)
    if plan_id is not None:
        options = {**options, "plan": plan_id}
    answers = AnswerRepository(session)
    # Fast path, no lock: a stored answer of this epoch and grid version costs nothing.
    fp = fingerprint(statistic, mechanism, eps, options, grid.version)
    if (stored := answers.find(grid.id, dataset.epoch, fp)) is not None:
        return _cached(stored)

    dataset = ledger.lock_dataset(session, dataset.id)  # the epoch is fixed from here on
    epoch = dataset.epoch
    # The answer uses, and charges the users of, exactly the snapshot read here; its
    # version is part of the fingerprint (an upload committing meanwhile is harmless).
    arrays = load_grid_snapshot(session, grid)
    fp = fingerprint(statistic, mechanism, eps, options, arrays.version)
    plan_caps = None if plan_id is None else _plan_caps(session, plan_id, grid, arrays)
    budget = ledger.lock_budget(session, dataset, epoch, arrays.user_ids)
    if (stored := answers.find(grid.id, epoch, fp)) is not None:  # a twin committed meanwhile
        return _cached(stored)

    caps = plan_caps
    exhausted = budget.exhausted(arrays.user_ids, eps.charged)
    if dataset.on_exhausted == "exclude" and exhausted.any():
        if exhausted.all():
            raise BudgetExhausted("every user of this grid has exhausted the privacy budget")
        caps = np.where(exhausted, 0, arrays.counts if caps is None else caps)
    engine_options = {k: v for k, v in options.items() if k != "plan"}
    release = _release(statistic, arrays, dataset, eps, mechanism, engine_options, caps)
    spend_quota(session, key, eps.charged)

    answer = answer_body(grid, statistic, mechanism, eps, options, release, epoch)
    stored = answers.add(
        QueryAnswer(
            public_id=answer["query_id"],
            dataset_id=dataset.id,
            grid_id=grid.id,
            epoch=epoch,
            grid_version=arrays.version,
            fingerprint=fp,
            statistic=statistic,
            mechanism=release.mechanism,
            epsilon=eps.charged,
            options=options,
            answer=answer,
            key_id=key.id,
        )
    )
    ledger.charge(
        session,
        budget,
        arrays.user_ids[release.kept > 0],
        eps.charged,
        key_id=key.id,
        kind="query",
        reference_id=stored.id,
        grid_id=grid.id,
    )
    return answer


def _plan_caps(session: Session, plan_id: str, grid: Grid, arrays) -> np.ndarray:
    """Γ caps from a stored slot release, so its suppressed users are not charged again."""
    stored = ReleaseRepository(session).by_public_id(plan_id)
    if stored is None or stored.dataset_id != grid.dataset_id:
        raise NotFound(f"no release {plan_id!r} of this dataset")
    kept = stored.kept.get(grid.public_id)
    if kept is None:
        raise InvalidRequest(f"release {plan_id} did not release grid {grid.public_id}")
    if kept["version"] != arrays.version:
        raise Conflict(f"grid {grid.public_id} changed since release {plan_id}; plan again")
    users = kept["users"]
    return np.fromiter(
        (users.get(str(int(u)), 0) for u in arrays.user_ids), np.int64, len(arrays.user_ids)
    )


def _release(
    statistic: str,
    arrays,
    dataset: Dataset,
    eps: EpsilonAmount,
    mechanism: str,
    options: dict[str, Any],
    caps: np.ndarray | None,
) -> core.Release:
    fn = core.release_mean if statistic == "mean" else core.release_variance
    try:
        return fn(arrays.grid, dataset.value_bound, eps.used, mechanism, caps=caps, **options)
    except ValueError as exc:
        raise InvalidRequest(f"cannot release this statistic: {exc}") from exc


def answer_body(
    grid: Grid,
    statistic: str,
    requested: str,
    eps: EpsilonAmount,
    options: dict[str, Any],
    release: core.Release,
    epoch: int,
) -> dict[str, Any]:
    """The API.md statistic answer for ``release`` (its own epsilon share is reported)."""
    return {
        "query_id": uuid.uuid4().hex,
        "grid_id": grid.public_id,
        "statistic": statistic,
        "mechanism": release.mechanism,
        "requested_mechanism": requested,
        "epsilon": float(release.epsilon) if release.epsilon < eps.used else float(eps.charged),
        "estimate": float(release.estimate),
        "sensitivity": float(release.sensitivity),
        "noise_scale": float(release.noise_scale),
        "worst_case_bias": _opt_float(release.worst_case_bias),
        "worst_case_error": _opt_float(release.worst_case_error),
        "ci95": [float(release.ci95[0]), float(release.ci95[1])],
        "n_users": len(release.kept),
        "n_users_charged": int(np.count_nonzero(release.kept)),
        "cached": False,
        "epoch": epoch,
        "options": options,
        "details": _jsonable(release.details),
    }


def _opt_float(x: float | None) -> float | None:
    return None if x is None else float(x)


def _jsonable(details: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(details), default=lambda o: getattr(o, "tolist", str)()))


def quote(session: Session, grid_public_id: str, statistic: str, target_error: float) -> dict:
    """Smallest epsilon whose worst-case error reaches ``target_error`` (public counts only)."""
    grid = get_grid_by_public_id(session, grid_public_id)
    dataset = get_dataset(session, grid.dataset_id)
    arrays = load_grid_snapshot(session, grid)
    max_eps = float(dataset.max_epsilon_per_query)
    try:
        found = core.quote_epsilon(
            arrays.counts,
            dataset.value_bound,
            target_error,
            statistic,
            max_epsilon=max_eps,
            min_epsilon=float(MIN_EPSILON),
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    return {
        "grid_id": grid.public_id,
        "statistic": statistic,
        "target_error": target_error,
        "achievable": found is not None,
        "epsilon": None if found is None else float(found[0]),
        "mechanism": None if found is None else found[1],
        "max_epsilon_per_query": max_eps,
    }
