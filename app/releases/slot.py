"""The grids of the slots to release: the dataset's own, or coarser ones made on demand.

A release covers ``slots`` consecutive slots: every grid whose slot starts in
``[slot_start, slot_start + slots × slot_minutes)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.datasets.coarse import GridLevel, coarse_grids
from app.datasets.grid_store import SlotGrid
from app.datasets.models import Dataset
from app.kit.errors import InvalidRequest, NotFound
from app.releases.repository import ReleaseRepository
from app.time.slots import datetime_to_us, format_local, get_zone

#: The longest span one release may cover (API.md: "allow at least a week").
MAX_SPAN = timedelta(days=7)


@dataclass(frozen=True)
class SpanGrids:
    start: datetime  # UTC
    end: datetime  # UTC, exclusive
    slots: int
    level: GridLevel | None  # None: the dataset's own grids
    h3_resolution: int  # of the grids (the level's, or the dataset's own)
    slot_minutes: int
    grids: Sequence[SlotGrid] = field(default_factory=list)


def grids_at(
    session: Session, dataset: Dataset, level: GridLevel | None, start: datetime, end: datetime
) -> Sequence[SlotGrid]:
    """Every grid with records at ``level`` starting in ``[start, end)``, by (slot, cell):
    the dataset's own as rows, coarser ones as the ORM instances that made them."""
    if level is None:
        return ReleaseRepository(session).grids_in_span(dataset.id, start, end)
    return coarse_grids(session, dataset, level, start, end)


def span_grids(
    session: Session, dataset: Dataset, level: GridLevel | None, start: datetime, slots: int
) -> SpanGrids:
    """The grids of ``slots`` consecutive slots from ``start`` (404 if none has a grid)."""
    res = dataset.h3_resolution if level is None else level.h3_resolution
    minutes = dataset.timeslot_minutes if level is None else level.slot_minutes
    length = timedelta(minutes=minutes)
    if slots * length > MAX_SPAN:
        raise InvalidRequest(
            f"slots × slot length must be at most 7 days; {slots} slots of "
            f"{minutes} minutes is longer: release fewer slots"
        )
    end = start + slots * length
    grids = grids_at(session, dataset, level, start, end)
    if not grids:
        local = format_local(datetime_to_us(start), get_zone(dataset.timezone))
        what = "starts at" if slots == 1 else f"starts in the {slots} slots from"
        raise NotFound(f"no grid of dataset {dataset.id} {what} {local} ({dataset.timezone})")
    return SpanGrids(start, end, slots, level, res, minutes, grids)
