"""Whole-timeslot releases (Clip-User, docs/math.md): plan preview, release, listing
(reading one, public or not: ``app.releases.public``)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from app.answers.schemas import StatisticAnswer
from app.http.deps import AnalystKey, HeavySessionDep, ReaderKey, SessionDep
from app.http.query_params import CheckedRoute
from app.kit.errors import BudgetExhausted, Forbidden, NotFound, Unauthenticated, responses
from app.kit.gc_pause import gc_paused
from app.kit.ids import DatasetId
from app.observability.metrics import record_release
from app.releases import listing, service
from app.releases.formats import STATISTICS
from app.releases.models import with_grids_json
from app.releases.schemas import (
    GridRelease,
    PreviewOut,
    ReleaseIn,
    ReleaseList,
    ReleaseOut,
)

JSON = "application/json"
router = APIRouter(tags=["releases"], route_class=CheckedRoute)


@router.post(
    "/datasets/{dataset_id}/releases",
    response_model=ReleaseOut,
    response_model_exclude_unset=True,  # a statistic not asked for is absent, not null
    responses=responses(Unauthenticated, Forbidden, BudgetExhausted, NotFound),
    summary="Release every grid of a timeslot with at least min_users users",
    description="Grids below `min_users` are skipped and charge nobody. Give `epsilon` (per "
    "grid) or `max_user_cost` (the most any user pays; dpgate picks the largest per-grid "
    "epsilon within it). A refusal for budget says `largest_epsilon`, the largest per-grid "
    "epsilon that would fit now. The same request again in the same budget epoch returns "
    "the stored release with `cached: true`.",
)
def create_release(
    dataset_id: DatasetId,
    body: ReleaseIn,
    key: AnalystKey,
    session: HeavySessionDep,
) -> Any:
    started = time.perf_counter()
    with gc_paused():  # ~10^6 short-lived objects: no collector walks meanwhile
        answer, grids_json = service.release_slot(session, key, dataset_id, body)
        fast = spliced_release_json(answer, grids_json)
    record_release(dataset_id, answer, time.perf_counter() - started)
    return answer if fast is None else Response(fast, media_type=JSON)


_TOP = frozenset(ReleaseOut.model_fields)
_GRID = frozenset(GridRelease.model_fields)
_ANSWER = frozenset(StatisticAnswer.model_fields)


def spliced_release_json(answer: dict[str, Any], grids_json: bytes | None) -> bytes | None:
    """The JSON of a release as ``ReleaseOut`` (exclude_unset) would give it, without
    validating 10⁵ grids again (a day: ~4 s), its grids ``grids_json`` (their JSON as
    stored) spliced in. A stored twin is sent as ``GET /releases/{id}`` sends it. A new
    one: when every key, at every level, is one of the model's, the answer as built is
    already that (tested: validating it changes nothing). ``None`` (validate as usual)
    for anything else."""
    if grids_json is None:
        return None
    if answer.get("cached") is True:
        return with_grids_json(answer, grids_json)
    if answer.get("cached") is not False or not answer.keys() <= _TOP:
        return None
    grids = answer.get("grids")
    if not isinstance(grids, list):
        return None
    for grid in grids:
        if not grid.keys() <= _GRID:
            return None
        for stat in STATISTICS:
            one = grid.get(stat)
            if one is not None and not one.keys() <= _ANSWER:
                return None
    return with_grids_json(answer, grids_json)


@router.post(
    "/datasets/{dataset_id}/releases/preview",
    response_model=PreviewOut,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="The plan of a release, without values and without any charge",
)
def preview_release(
    dataset_id: str, body: ReleaseIn, _: AnalystKey, session: HeavySessionDep
) -> dict:
    with gc_paused():  # as a release: no collector walks over its many objects
        return service.preview_slot(session, dataset_id, body)


@router.get(
    "/datasets/{dataset_id}/releases",
    response_model=ReleaseList,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="A dataset's stored releases, newest first",
    description="What each release was (slot, partition, epsilon, cost, grids, when), a "
    "page at a time: `next` is the `offset` of the next page, or null after the last. "
    "`GET /releases/{release_id}` gives a whole release; reading it again is free.",
)
def list_releases(
    dataset_id: DatasetId,
    _: ReaderKey,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="Releases per page.")] = 100,
    offset: Annotated[
        int, Query(ge=0, le=2**31 - 1, description="Skip this many (`next` of a page).")
    ] = 0,
) -> ReleaseList:
    return listing.list_releases(session, dataset_id, limit=limit, offset=offset)
