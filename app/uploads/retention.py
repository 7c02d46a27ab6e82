"""Raw retention: records older than ``raw_retention_days`` are dropped a whole UTC month at a
time (``app.datasets.partitions.drop_month``), at an upload's end under the dataset lock, once
every grid of the month has its snapshot (docs/architecture.md). ``datasets.raw_kept_from`` is the
first instant kept; an upload into a dropped slot is refused (409, :func:`refuse_dropped_slots`);
a partition in use (``LOCK_WAIT``) waits for the next upload."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from psycopg.errors import LockNotAvailable
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app.datasets.models import Dataset
from app.datasets.partitions import drop_month, next_month, stored_months
from app.kit.errors import Conflict
from app.time.slots import datetime_to_us, format_local, get_zone

log = logging.getLogger(__name__)

#: Longest wait for a month's partition to be free to detach (then left for later).
LOCK_WAIT = timedelta(seconds=1)


def expired_months(session: Session, dataset: Dataset, now: datetime) -> list[datetime]:
    """The dataset's stored months wholly older than its retention, ascending."""
    if dataset.raw_retention_days is None:
        return []
    cutoff = now - timedelta(days=dataset.raw_retention_days)
    return [m for m in stored_months(session, dataset.id) if next_month(m) <= cutoff]


def apply_retention(session: Session, dataset: Dataset, now: datetime | None = None) -> int:
    """Drop the dataset's expired months (oldest first, stopping at the first that cannot
    go yet) and move ``raw_kept_from`` past them; how many were dropped."""
    dropped = 0
    for month in expired_months(session, dataset, now or datetime.now(UTC)):
        end = next_month(month)
        try:
            with session.begin_nested():
                ms = int(LOCK_WAIT.total_seconds() * 1000)
                session.execute(text(f"SET LOCAL lock_timeout = {ms}"))
                drop_month(session, dataset.id, month)
        except OperationalError as exc:
            if not isinstance(exc.orig, LockNotAvailable):
                raise
            log.info("retention: month %s of dataset %s is busy; later", month, dataset.id)
            break
        dataset.raw_kept_from = max(end, dataset.raw_kept_from or end)
        dropped += 1
    if dropped:
        session.execute(text("SET LOCAL lock_timeout = DEFAULT"))
        session.flush()
    return dropped


def refuse_dropped_slots(dataset: Dataset, slots_us: list[int]) -> None:
    """409 if a slot of ``slots_us`` starts before the raw records the dataset still
    keeps: its grid is final, its raw records gone."""
    if dataset.raw_kept_from is None or not slots_us:
        return
    first = min(slots_us)
    if first < datetime_to_us(dataset.raw_kept_from):
        zone = get_zone(dataset.timezone)
        kept = format_local(datetime_to_us(dataset.raw_kept_from), zone)
        raise Conflict(
            f"this upload has records of the slot {format_local(first, zone)}, but the "
            f"dataset's raw records before {kept} were dropped by its retention "
            f"(raw_retention_days = {dataset.raw_retention_days}): their grids are final; "
            "upload only later records"
        )
