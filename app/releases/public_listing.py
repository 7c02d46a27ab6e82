"""``GET /public/releases`` and the catalogue's rows: the public releases, newest first.

One read through a partial index (``ix_slot_releases_public_created_at``, or with a
dataset ``ix_slot_releases_public_dataset_id_created_at``; migration 0015) that holds the
public releases only, in the listing's order; each row's head (the stored answer
without its grids, small) gives what the listing shows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.datasets.models import Dataset
from app.releases.models import SlotRelease
from app.releases.schemas import ReleaseSummary
from app.time.budget_windows import privacy_unit
from app.time.slots import datetime_to_us, format_local, get_zone


class PublicRelease(ReleaseSummary):
    """A public release: the listing's fields, its dataset's and its quality."""

    dataset: int = Field(description="The dataset's id.")
    dataset_name: str
    value_unit: str | None = Field(description="The values' unit (the dataset's).")
    privacy_unit: str = Field(description="`user`, or `user-day` and the like.")
    timezone: str = Field(description="The dataset's IANA time zone (times are local).")
    statistics: list[str]
    mechanism: str | None
    profile: dict[str, Any] | None = Field(
        description="A typical-day release's profile (`from`, `to`, `days`, `n_days`), or null."
    )
    coverage: dict[str, float] | None = Field(
        description="Shares of the slots' records and users in released cells."
    )
    useful: dict[str, Any] | None = Field(
        description="The share of records, and the cells, whose every ci95 is narrow enough."
    )
    links: dict[str, str] = Field(description="Each format's URL and the map's.")


class PublicReleaseList(BaseModel):
    releases: list[PublicRelease] = Field(description="Newest first.")
    next: int | None = Field(description="The `offset` of the next page, or null.")


def _row(release: SlotRelease, dataset: Dataset) -> dict[str, Any]:
    head = release.head
    zone = get_zone(dataset.timezone)

    def local(moment: datetime) -> str:
        return format_local(datetime_to_us(moment), zone)

    return {
        "release_id": release.public_id,
        "slot_start": head.get("slot_start") or local(release.slot_start),
        "slots": head.get("slots") or 1,
        "partition": head.get("partition") or "fixed",
        "epsilon": float(release.epsilon),
        "max_user_cost": head.get("max_user_cost"),
        "n_grids": release.n_grids,
        "h3_resolution": head.get("h3_resolution"),
        "slot_minutes": head.get("slot_minutes"),
        "created_at": local(release.created_at),
        "dataset": dataset.id,
        "dataset_name": dataset.name,
        "value_unit": dataset.value_unit,
        "privacy_unit": privacy_unit(dataset),
        "timezone": dataset.timezone,
        "statistics": head.get("statistics") or ["mean", "variance"],
        "mechanism": head.get("mechanism"),
        "profile": head.get("profile"),
        "coverage": head.get("coverage"),
        "useful": head.get("useful"),
    }


def public_page(
    session: Session, dataset_id: int | None, *, limit: int, offset: int
) -> tuple[list[dict[str, Any]], bool]:
    """One page of public releases (of ``dataset_id``'s, or all), newest first, and
    whether more follow."""
    query = (
        select(SlotRelease, Dataset)
        .join(Dataset, Dataset.id == SlotRelease.dataset_id)
        .where(SlotRelease.public)  # the partial indexes' predicate, as written there
        .order_by(SlotRelease.created_at.desc(), SlotRelease.id.desc())
        .limit(limit + 1)
        .offset(offset)
    )
    if dataset_id is not None:
        query = query.where(SlotRelease.dataset_id == dataset_id)
    found = session.execute(query).all()
    return [_row(r, d) for r, d in found[:limit]], len(found) > limit
