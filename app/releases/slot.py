"""The grids of one slot to release: the dataset's own, or coarser ones made on demand."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from app.datasets.coarse import GridLevel, coarse_grids
from app.datasets.models import Dataset, Grid
from app.errors import NotFound
from app.ingest.timeslots import datetime_to_us, format_local, get_zone
from app.releases.repository import ReleaseRepository


@dataclass(frozen=True)
class SlotGrids:
    start: datetime  # UTC
    level: GridLevel | None  # None: the dataset's own grids
    grids: list[Grid] = field(default_factory=list)
    skipped: int = 0  # grids below min_users, not released


def slot_grids(
    session: Session, dataset: Dataset, level: GridLevel | None, start: datetime
) -> SlotGrids:
    """Every grid with records that starts at ``start`` at ``level`` (404 if none)."""
    if level is None:
        grids = ReleaseRepository(session).grids_in_slot(dataset.id, start)
    else:
        grids = coarse_grids(session, dataset, level, start)
    if not grids:
        local = format_local(datetime_to_us(start), get_zone(dataset.timezone))
        raise NotFound(f"no grid of dataset {dataset.id} starts at {local} ({dataset.timezone})")
    return SlotGrids(start, level, grids)
