"""What ``/map`` draws around a release, read like the release itself: its dataset's footprint
(every cell that held a record, with boundaries, and their parents at the release's coarser
resolutions) and one slot's occupancy. Both are public occupancy (SECURITY.md), costing no budget.
"""

from __future__ import annotations

import time
from datetime import timedelta
from itertools import islice
from typing import Annotated, Any

import h3
import orjson
from fastapi import APIRouter, Query, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.datasets.models import Dataset, Grid
from app.datasets.service import all_grids, dataset_out, get_dataset, parse_slot_start
from app.http.query_params import CheckedRoute
from app.kit.errors import Forbidden, InvalidRequest, NotFound, Unauthenticated, responses
from app.releases.models import SlotRelease
from app.releases.public import RELEASE_ID, ReaderOrPublic
from app.releases.repository import ReleaseRepository
from app.releases.service import no_release

FOOTPRINT_TTL_S = 60.0  # the footprint grows with uploads: a process re-reads it this often
MAX_SLOT_CELLS = 50_000
#: per application (its database): (dataset, resolutions) -> (when read, body)
Footprints = dict[tuple[int, tuple[int, ...]], tuple[float, bytes]]

router = APIRouter(tags=["map"], route_class=CheckedRoute)
JSON = "application/json"
HEADERS = {"Cache-Control": "no-cache"}


def boundary(cell: str) -> list[list[float]]:
    """The cell's outer ring, lon/lat to 6 decimals (about 0.1 m), closed."""
    ring = [[round(lon, 6), round(lat, 6)] for lat, lon in h3.cell_to_boundary(cell)]
    return [*ring, ring[0]]


def _release(session: Session, release_id: str) -> tuple[SlotRelease, Dataset]:
    release = ReleaseRepository(session).by_public_id(release_id, grids=False)
    if release is None:
        raise no_release(release_id)
    return release, get_dataset(session, release.dataset_id)


def _resolutions(release: SlotRelease, dataset: Dataset) -> tuple[int, ...]:
    """The resolutions the release's cells can have: its own, down to its coarsest."""
    finest = release.head.get("h3_resolution") or dataset.h3_resolution
    coarsest = release.head.get("coarsest_resolution")
    if release.head.get("partition") != "adaptive" or coarsest is None:
        coarsest = finest
    return tuple(range(min(coarsest, finest), finest + 1))


def _footprint(session: Session, release_id: str, cache: Footprints) -> bytes:
    release, dataset = _release(session, release_id)
    public = b'{"public":true,' if release.public else b'{"public":false,'
    levels = _resolutions(release, dataset)
    key = (dataset.id, levels)
    hit = cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < FOOTPRINT_TTL_S:
        return public + hit[1]
    cells = session.scalars(
        select(Grid.h3_cell)
        .where(Grid.dataset_id == dataset.id, Grid.slot_minutes == 0)
        .distinct()
        .order_by(Grid.h3_cell)
    ).all()
    ringed = set(cells)
    for res in levels:
        if res < dataset.h3_resolution:
            ringed.update(h3.cell_to_parent(c, res) for c in cells)
    info = dataset_out(dataset).model_dump(
        include={"id", "name", "timezone", "value_bound", "value_unit", "h3_resolution",
                 "timeslot_minutes", "privacy_unit"}
    )  # fmt: skip
    rings = {c: boundary(c) for c in sorted(ringed)}
    body = orjson.dumps({"dataset": info, "footprint": cells, "rings": rings})[1:]
    if len(cache) > 64:
        cache.clear()
    cache[key] = (time.monotonic(), body)
    return public + body


@router.get(
    "/releases/{release_id}/footprint",
    dependencies=[RELEASE_ID],
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="The release's dataset: its facts and whole public footprint (for /map)",
    description="Every cell of the dataset's resolution that ever held a record (public "
    "occupancy, nothing charged), each with its boundary (`rings`: [lon, lat] rings), and "
    "the boundaries of their parents at the release's coarser resolutions. Read like the "
    "release: without a key when it is public.",
)
async def release_footprint(request: Request, access: ReaderOrPublic) -> Response:
    state = request.app.state
    if not hasattr(state, "footprints"):
        state.footprints = {}
    body = await state.database.run(_footprint, access.release_id, state.footprints)
    return Response(body, media_type=JSON, headers=HEADERS)


def _occupancy(session: Session, release_id: str, slot_start: str) -> dict[str, Any]:
    release, dataset = _release(session, release_id)
    head = release.head
    if head.get("profile"):  # a typical day pools many dates: no one slot's occupancy
        return {"slot_start": slot_start, "grids": []}
    minutes = head.get("slot_minutes") or dataset.timeslot_minutes
    slot = parse_slot_start(dataset, slot_start)
    end = release.slot_start + timedelta(minutes=minutes * (head.get("slots") or 1))
    if not release.slot_start <= slot < end:
        raise InvalidRequest(f"slot_start {slot_start[:40]!r} is not one of this release's slots")
    res = head.get("h3_resolution")  # the release's grids, when coarser than the dataset's
    coarser_res = None if res in (None, dataset.h3_resolution) else int(res)
    coarser_minutes = None if minutes == dataset.timeslot_minutes else int(minutes)
    found = all_grids(
        session,
        dataset,
        slot_start=slot_start,
        h3_resolution=coarser_res,
        slot_minutes=coarser_minutes,
    )
    grids = [
        g.model_dump(include={"h3_cell", "n_users", "n_records"})
        for g in islice(found, MAX_SLOT_CELLS)
    ]
    return {"slot_start": slot_start, "grids": grids}


@router.get(
    "/releases/{release_id}/occupancy",
    dependencies=[RELEASE_ID],
    responses=responses(InvalidRequest, Unauthenticated, Forbidden, NotFound),
    summary="One of the release's slots: its occupied cells with their users (for /map)",
    description="The public occupancy (cells, users, records) of one slot of the release, "
    "at the release's resolution and slot length; empty for a profile (a typical day "
    "pools many dates). Read like the release: without a key when it is public.",
)
async def release_occupancy(
    request: Request,
    access: ReaderOrPublic,
    slot_start: Annotated[
        str, Query(min_length=1, max_length=64, description="One of the release's slots.")
    ],
) -> Response:
    body = await request.app.state.database.run(_occupancy, access.release_id, slot_start)
    return Response(orjson.dumps(body), media_type=JSON, headers=HEADERS)
