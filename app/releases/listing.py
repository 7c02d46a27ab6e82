"""``GET /datasets/{id}/releases``: a dataset's stored releases, newest first.

Read from what each release stored, defensively: releases made before a field existed
(``slots``, ``partition``) report the behaviour they had (one slot, fixed partition).
Times are local with the dataset's offset, as everywhere in the API.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from app.datasets.service import get_dataset
from app.releases.repository import ReleaseRepository, ReleaseRow
from app.releases.schemas import ReleaseList, ReleaseSummary
from app.time.slots import datetime_to_us, format_local, get_zone


def _summary(row: ReleaseRow, timezone: str) -> ReleaseSummary:
    zone = get_zone(timezone)

    def local(moment: datetime) -> str:
        return format_local(datetime_to_us(moment), zone)

    return ReleaseSummary(
        release_id=row.public_id,
        slot_start=row.local_slot_start or local(row.slot_start),
        slots=row.slots or 1,
        partition=row.partition or "fixed",
        epsilon=float(row.epsilon),
        max_user_cost=row.max_user_cost,
        n_grids=row.n_grids or 0,
        h3_resolution=row.h3_resolution,
        slot_minutes=row.slot_minutes,
        created_at=local(row.created_at),
        profile=row.profile if isinstance(row.profile, dict) else None,
        useful=row.useful if isinstance(row.useful, dict) else None,
    )


def list_releases(session: Session, dataset_id: int, *, limit: int, offset: int) -> ReleaseList:
    dataset = get_dataset(session, dataset_id)
    rows, more = ReleaseRepository(session).page(dataset.id, limit=limit, offset=offset)
    return ReleaseList(
        releases=[_summary(r, dataset.timezone) for r in rows],
        next=offset + len(rows) if more else None,
    )
