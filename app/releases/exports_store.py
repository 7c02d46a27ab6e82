"""A stored release's CSV and GeoJSON, rendered once and kept (migration 0018).

A stored release never changes, so neither do its exports (:mod:`app.releases.formats`:
pure functions of the release and its dataset's ``value_unit``, which no request
changes). Rendering a day release's (~10^5 grids) took 12 s for the CSV and 20 s for the
GeoJSON on every read; now the first read (or publishing, :func:`render_exports`)
renders each once and keeps it as one zstd frame (:mod:`app.releases.packing`), and
every read after sends it as it is (``Content-Encoding: zstd`` to a client that accepts
it) or unpacked. A kept export is tagged with the code that rendered it
(``app.__version__``, which the ETag names too): one rendered by another version is
rendered again on its next read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

import orjson
from fastapi.responses import Response
from sqlalchemy import ForeignKey, LargeBinary, String
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Mapped, Session, mapped_column

from app import __version__
from app.datasets.service import get_dataset
from app.db.base import Base, UTCDateTime, utcnow
from app.db.unit import binary_rows
from app.kit.gc_pause import gc_paused
from app.releases import service
from app.releases.formats import ReleaseFormat, export_response, release_csv, release_geojson
from app.releases.packing import pack, unpack
from app.releases.repository import ReleaseRepository

log = logging.getLogger(__name__)

#: The formats kept: the ones rendered from the whole release (JSON is stored as it is
#: served; the Data Package is rendered from the release's head alone).
KEPT = (ReleaseFormat.csv, ReleaseFormat.geojson)

_READ = (
    "SELECT e.body FROM release_exports e JOIN slot_releases r ON r.id = e.release_id"
    " WHERE r.public_id = %s AND e.format = %s AND e.renderer = %s"
)


class ReleaseExport(Base):
    """One export of a stored release: ``body`` is its bytes as one zstd frame, stored as
    it comes (``STORAGE EXTERNAL``), ``renderer`` the version of the code that made it."""

    __tablename__ = "release_exports"

    release_id: Mapped[int] = mapped_column(
        ForeignKey("slot_releases.id", ondelete="CASCADE"), primary_key=True
    )
    format: Mapped[str] = mapped_column(String(16), primary_key=True)
    renderer: Mapped[str] = mapped_column(String(64))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


def render(release: dict, fmt: ReleaseFormat, unit: str | None) -> bytes:
    """The bytes of ``fmt`` (a kept format) of the served release ``release``."""
    if fmt is ReleaseFormat.geojson:
        return orjson.dumps(release_geojson(release, unit))
    return release_csv(release, unit).encode()


def kept_export(session: Session, release_id: str, fmt: ReleaseFormat) -> bytes | None:
    """The kept export (packed) of the release with this public id, if this version
    rendered it."""
    rows = binary_rows(session, _READ, (release_id, fmt.value, __version__))
    return bytes(rows[0][0]) if rows else None


def keep_export(session: Session, release_pk: int, fmt: ReleaseFormat, packed: bytes) -> None:
    """Keep ``packed`` as the export (replacing one another version rendered). In a
    savepoint: a database that refuses the write (read-only, or the release deleted
    meanwhile) costs the next read a render, never this one its answer."""
    row = {"release_id": release_pk, "format": fmt.value, "renderer": __version__}
    stmt = insert(ReleaseExport).values(**row, body=packed, created_at=utcnow())
    stmt = stmt.on_conflict_do_update(
        index_elements=["release_id", "format"],
        set_={"body": stmt.excluded.body, "renderer": stmt.excluded.renderer},
    )
    try:
        with session.begin_nested():
            session.execute(stmt)
    except SQLAlchemyError as exc:
        log.warning("release export not kept (%s): %s", fmt.value, exc.__class__.__name__)


def packed_export(
    session: Session,
    release_id: str,
    fmt: ReleaseFormat,
    rendered: Callable[[], tuple[int, bytes]],
) -> bytes:
    """The export, packed: kept, or ``rendered()`` (``(release's primary key, bytes)``)
    now and kept."""
    packed = kept_export(session, release_id, fmt)
    if packed is None:
        release_pk, body = rendered()
        packed = pack(body)
        keep_export(session, release_pk, fmt, packed)
    return packed


def send_export(packed: bytes, fmt: ReleaseFormat, release_id: str, zstd: bool) -> Response:
    """The response of a kept export: as stored to a client that accepts zstd, else
    unpacked."""
    if zstd:
        response = export_response(packed, fmt, release_id)
        response.headers["Content-Encoding"] = "zstd"
        return response
    return export_response(unpack(packed), fmt, release_id)


def rendered_export(session: Session, release_id: str, fmt: ReleaseFormat) -> tuple[int, bytes]:
    """``(the release's primary key, its export rendered now)``; NotFound if it is gone."""
    release = service.release_json(session, release_id)
    stored = ReleaseRepository(session).by_public_id(release_id, grids=False)
    if stored is None:
        raise service.no_release(release_id)
    unit = get_dataset(session, stored.dataset_id).value_unit
    return stored.id, render(release, fmt, unit)


def export(session: Session, release_id: str, fmt: ReleaseFormat) -> bytes:
    """The export of the release with this public id, packed (kept, or rendered now)."""
    return packed_export(
        session, release_id, fmt, lambda: rendered_export(session, release_id, fmt)
    )


def render_exports(session: Session, release_id: str) -> None:
    """Render and keep every kept format of a release not kept yet (run when a release is
    made public, after the answer: its first reader then finds them kept). A failure is
    logged: the first read renders what is missing."""
    try:
        with gc_paused():  # a day release is ~10^6 objects: no collector walks meanwhile
            for fmt in KEPT:
                export(session, release_id, fmt)
    except Exception:  # after the answer: nothing else would report it
        log.exception("rendering the exports of release %s failed", release_id)
