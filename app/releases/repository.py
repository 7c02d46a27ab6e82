"""All SQL of slot releases."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from psycopg import sql
from sqlalchemy import cast, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.datasets.grid_store import GridRow
from app.datasets.models import Grid
from app.db.unit import binary_rows
from app.releases.models import SlotRelease


@dataclass(frozen=True)
class ReleaseRow:
    """What the listing shows of one stored release, in ``_listing_query``'s order; the
    fields a release body did not have when it was stored (``slots``, ``partition``,
    ...) are None."""

    public_id: str
    slot_start: datetime
    local_slot_start: str | None
    slots: int | None
    partition: str | None
    epsilon: Decimal
    max_user_cost: float | None
    n_grids: int | None
    h3_resolution: int | None
    slot_minutes: int | None
    created_at: datetime
    profile: dict[str, Any] | None = None  # a typical day's (API.md ``profile``)
    useful: dict[str, Any] | None = None


def _listing_query(dataset_id: int, limit: int, offset: int) -> Any:
    """Only the small fields of each stored answer, in ``ReleaseRow``'s order: they are
    in its head (the answer without its grids, migration 0011), parsed once per row (as
    ``jsonb``) rather than once per field; the grids are counted in ``n_grids``."""
    answer = cast(SlotRelease.head, JSONB)
    order = (SlotRelease.created_at.desc(), SlotRelease.id.desc())
    # the page's ids from the index alone: the rows an offset skips are never read
    ids = (
        select(SlotRelease.id)
        .where(SlotRelease.dataset_id == dataset_id)
        .order_by(*order)
        .limit(limit)
        .offset(offset)
    )
    newest = (
        select(
            SlotRelease.id,
            SlotRelease.public_id,
            SlotRelease.slot_start,
            SlotRelease.epsilon,
            SlotRelease.created_at,
            SlotRelease.n_grids,
            answer.label("answer"),
        )
        .where(SlotRelease.id.in_(ids.scalar_subquery()))
        .subquery()
    )
    a = newest.c.answer
    return select(
        newest.c.public_id,
        newest.c.slot_start,
        a["slot_start"].as_string(),
        a["slots"].as_integer(),
        a["partition"].as_string(),
        newest.c.epsilon,
        a["max_user_cost"].as_float(),
        newest.c.n_grids,
        a["h3_resolution"].as_integer(),
        a["slot_minutes"].as_integer(),
        newest.c.created_at,
        a["profile"],
        a["useful"],
    ).order_by(newest.c.created_at.desc(), newest.c.id.desc())


#: GridRow's fields; slot_start as naive UTC wall time (a timestamptz per row cost
#: psycopg a zone conversion: twice this read's client CPU).
_SPAN_GRIDS = sql.SQL(
    "SELECT id, public_id, h3_cell, slot_start AT TIME ZONE 'UTC', n_users, version FROM {}"
    " WHERE dataset_id = %s AND slot_minutes = 0 AND slot_start >= %s AND slot_start < %s"
    " AND n_records > 0 ORDER BY slot_start, h3_cell"
).format(sql.Identifier(Grid.__tablename__))


class ReleaseRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def grids_in_span(self, dataset_id: int, start: datetime, end: datetime) -> list[GridRow]:
        """The dataset's own grids with records starting in ``[start, end)``, by (slot,
        cell): rows, not ORM instances (a day's 10⁵ took seconds to load and read), each
        ``slot_start`` in UTC as ``UTCDateTime`` reads it."""
        rows = binary_rows(self.session, _SPAN_GRIDS, (dataset_id, start, end))
        utc = {t: t.replace(tzinfo=UTC) for t in {r[3] for r in rows}}  # a span has few slots
        return [GridRow(r[0], r[1], r[2], utc[r[3]], r[4], r[5]) for r in rows]

    def find(self, dataset_id: int, epoch: int, fingerprint: str) -> SlotRelease | None:
        """The stored release (with its grids) of this fingerprint, if any."""
        return self.with_grids(
            self.session.scalars(
                select(SlotRelease).where(
                    SlotRelease.dataset_id == dataset_id,
                    SlotRelease.epoch == epoch,
                    SlotRelease.fingerprint == fingerprint,
                )
            ).first()
        )

    def by_public_id(self, public_id: str, *, grids: bool = True) -> SlotRelease | None:
        found = self.session.scalars(
            select(SlotRelease).where(SlotRelease.public_id == public_id)
        ).first()
        return self.with_grids(found) if grids else found

    def with_grids(self, release: SlotRelease | None) -> SlotRelease | None:
        """``release`` with its grids loaded as a binary result: as text, Postgres would
        send a day release's grids (~240 MB) in hex, twice their size, decoded here."""
        if release is None or "grids" in release.__dict__:
            return release
        rows = binary_rows(
            self.session, "SELECT grids FROM slot_releases WHERE id = %s", (release.id,)
        )
        if not rows:
            raise LookupError(f"release {release.public_id} is gone")
        set_committed_value(release, "grids", rows[0][0])
        return release

    def add(self, release: SlotRelease) -> SlotRelease:
        self.session.add(release)
        self.session.flush()
        return release

    def page(self, dataset_id: int, *, limit: int, offset: int) -> tuple[list[ReleaseRow], bool]:
        """One page of the dataset's releases, newest first (index
        ``ix_slot_releases_dataset_id_created_at``, migration 0008), and whether more follow."""
        rows = self.session.execute(_listing_query(dataset_id, limit + 1, offset)).all()
        found = [ReleaseRow(*row) for row in rows[:limit]]
        return found, len(rows) > limit
