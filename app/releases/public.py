"""Reading stored releases, with or without a key: ``GET /releases/{id}`` in every format,
``PATCH /releases/{id}`` (public or private) and ``GET /public/releases``.

A release made public is read by anyone without a key; publishing spends nothing and
changes nothing else (the ``public`` column, migration 0015). Whether a release is public
is read from the database on every keyless read that misses the process's 0.5 s read
cache (``app.http.read_cache``), so making it private again closes it at once on the
process that took the change and within 0.5 s on the others. Without a key, a release
that is not public and one that does not exist answer the same 401.

Bodies are immutable (a stored release never changes), so each format has an ``ETag``
computed without building it and ``If-None-Match`` answers 304 after one indexed read. A
public body is sent with ``Cache-Control: public, no-cache``: any cache (a CDN, a portal)
may keep it but must revalidate before each use, so it never serves a release made
private since; the revalidation is the cheap 304.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, BackgroundTasks, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import update
from sqlalchemy.orm import Session

from app import __version__
from app.datasets.models import Dataset
from app.datasets.service import dataset_out, get_dataset
from app.http.deps import AdminKey, KeyAuth, SessionDep
from app.http.query_params import CheckedRoute
from app.keys.service import READER_ROLES, KeyIdentity
from app.kit.errors import Forbidden, InvalidRequest, NotFound, Unauthenticated, responses
from app.kit.gc_pause import gc_paused
from app.kit.json_numbers import JsonBody
from app.releases import exports_store, service
from app.releases.formats import (
    FORMAT_RESPONSES,
    ExportContext,
    ReleaseFormat,
    release_datapackage,
    release_url,
)
from app.releases.models import GRIDS_SHAPE, SlotRelease
from app.releases.public_listing import PublicRelease, PublicReleaseList, public_page
from app.releases.repository import ReleaseRepository
from app.releases.schemas import DataPackage, ReleaseBody

JSON = "application/json"
NOT_PUBLIC = (
    "this release is not public (or does not exist): send Authorization: Bearer <key>, "
    'or ask an admin to publish it (PATCH /releases/{release_id} with {"public": true})'
)
_ACCESS_SQL = "SELECT public, dataset_id, grids_shape FROM slot_releases WHERE public_id = %s"

router = APIRouter(tags=["releases"], route_class=CheckedRoute)


@dataclass(frozen=True)
class ReleaseAccess:
    """Who reads which release: ``key`` is None for a reader without a key (the release
    is then public)."""

    release_id: str
    key: KeyIdentity | None
    public: bool
    dataset_id: int
    grids_shape: int

    def found(self) -> ReleaseAccess:
        """This access, or ``NotFound`` for a key holder asking for a release that is not
        there (told after the request's own checks, as everywhere)."""
        if self.dataset_id == 0:
            raise service.no_release(self.release_id)
        return self


class ReleaseReader(KeyAuth):
    """A reader's key (admin, analyst or viewer) for any release, or no key at all for a
    public one; one indexed read on the query pool, from the event loop. A key that is
    sent must be valid (401) and a reader's (403), public release or not."""

    def __init__(self) -> None:
        super().__init__(*READER_ROLES)

    async def __call__(self, request: Request) -> ReleaseAccess:  # type: ignore[override]
        release_id = str(request.path_params.get("release_id", ""))
        key = None
        if request.headers.get("Authorization") is not None:
            key = await super().__call__(request)
        row = None
        if 1 <= len(release_id) <= 32:
            async with request.app.state.query_pool.connection() as conn:
                cur = await conn.execute(_ACCESS_SQL, (release_id,), prepare=True)
                row = await cur.fetchone()
        if key is None and (row is None or not row[0]):
            raise Unauthenticated(NOT_PUBLIC)
        if row is None:
            return ReleaseAccess(release_id, key, False, 0, -1)  # found() says NotFound
        return ReleaseAccess(release_id, key, bool(row[0]), int(row[1]), int(row[2]))


ReaderOrPublic = Annotated[ReleaseAccess, Depends(ReleaseReader())]


def _release_id(
    release_id: Annotated[
        str, Path(description="A `release_id` (`GET /datasets/{dataset_id}/releases`).")
    ],
) -> str:
    return release_id


#: Declares ``{release_id}`` in the document for the routes that read it through
#: :class:`ReleaseReader` (``dependencies=[RELEASE_ID]``), so /docs' Try it out can fill it.
RELEASE_ID = Depends(_release_id)


def base_url(request: Request) -> str:
    """The server's address as this request reached it (for URLs inside a body)."""
    return str(request.base_url).rstrip("/")


def accepts_zstd(request: Request, fmt: ReleaseFormat, access: ReleaseAccess) -> bool:
    """Whether the body goes as stored zstd frames (the client accepts them): the JSON of
    today's shape, and the kept exports."""
    accepted = request.headers.get("Accept-Encoding", "")
    stored = fmt in exports_store.KEPT or (
        fmt is ReleaseFormat.json and access.grids_shape == GRIDS_SHAPE
    )
    return stored and "zstd" in {e.split(";")[0].strip() for e in accepted.split(",")}


def release_etag(access: ReleaseAccess, fmt: ReleaseFormat, base: str, zstd: bool) -> str:
    """A strong ETag of the body, known without building it: the release, the format and
    its encoding, the shape its grids were stored in and the code that renders them (and
    the address the package's URLs name)."""
    shape = access.grids_shape if access.grids_shape != GRIDS_SHAPE else "now"
    where = base if fmt is ReleaseFormat.datapackage else ""
    text = f"{access.release_id}|{fmt.value}|{zstd}|{shape}|{__version__}|{where}"
    return f'"{hashlib.sha256(text.encode()).hexdigest()[:32]}"'


def not_modified(request: Request, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (or is ``*``), weak or strong."""
    header = request.headers.get("If-None-Match")
    if header is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def cache_headers(access: ReleaseAccess, etag: str) -> dict[str, str]:
    scope = "public" if access.public else "private"
    return {"ETag": etag, "Cache-Control": f"{scope}, no-cache", "Vary": "Accept-Encoding"}


def export_context(dataset: Dataset, base: str, slot_minutes: int | None) -> ExportContext:
    out = dataset_out(dataset)
    return ExportContext(
        dataset_name=dataset.name,
        unit=dataset.value_unit,
        privacy_unit=out.privacy_unit,
        timezone=dataset.timezone,
        value_bound=dataset.value_bound,
        slot_minutes=slot_minutes or dataset.timeslot_minutes,
        base_url=base,
    )


def _render(
    session: Session, release_id: str, fmt: ReleaseFormat, base: str, zstd: bool
) -> Response:
    """The body of one format (on a database thread); JSON and the kept exports as zstd
    frames for a client that accepts them."""
    with gc_paused():  # a day release is ~10^6 objects: no collector walks meanwhile
        if fmt in exports_store.KEPT:  # rendered once, then kept (exports_store)
            kept = exports_store.export(session, release_id, fmt)
            return exports_store.send_export(kept, fmt, release_id, zstd)
        if zstd and (packed := service.release_json_zstd(session, release_id)) is not None:
            return Response(packed, media_type=JSON, headers={"Content-Encoding": "zstd"})
        if fmt is ReleaseFormat.json:  # its stored bytes, as ReleaseBody (extra allowed)
            return Response(service.release_json_bytes(session, release_id), media_type=JSON)
        stored = ReleaseRepository(session).by_public_id(release_id, grids=False)
        if stored is None:  # deleted since the access check
            raise service.no_release(release_id)
        dataset = get_dataset(session, stored.dataset_id)
        ctx = export_context(dataset, base, stored.head.get("slot_minutes"))
        # the Data Package: the head is enough, no grids decoded
        head = {"slots": 1, "partition": "fixed", **stored.head, "release_id": release_id}
        return Response(orjson.dumps(release_datapackage(head, ctx)), media_type=JSON)


@router.get(
    "/releases/{release_id}",
    dependencies=[RELEASE_ID],
    response_model=ReleaseBody | DataPackage,  # the JSON formats (documentation only)
    responses={**FORMAT_RESPONSES, **responses(Unauthenticated, Forbidden, NotFound)},
    summary="A stored release: JSON, GeoJSON, CSV or a Data Package (public: without a key)",
    description="Reading is free. A public release (`PATCH /releases/{release_id}`) needs no "
    "key; without a key any other id answers 401, existing or not. Every answer has an "
    "`ETag`: send it back as `If-None-Match` for a 304. `datapackage` is a Frictionless "
    "Data Package describing the CSV (by URL) and the release's privacy terms.",
)
async def get_release(
    request: Request,
    access: ReaderOrPublic,
    format: Annotated[
        ReleaseFormat,
        Query(description="`json` (default), `geojson` (one H3 hexagon per grid), `csv` or "
              "`datapackage` (Frictionless Data Package of the CSV)."),
    ] = ReleaseFormat.json,
) -> Response:  # fmt: skip
    access = access.found()
    base = base_url(request)
    zstd = accepts_zstd(request, format, access)
    etag = release_etag(access, format, base, zstd)
    headers = cache_headers(access, etag)
    if not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    database = request.app.state.database
    body = await database.run(_render, access.release_id, format, base, zstd)
    body.headers.update(headers)
    return body


class PublicIn(JsonBody):
    model_config = ConfigDict(extra="forbid", strict=True)

    public: bool = Field(description="true: anyone may read it without a key; false: keys only.")


class PublicOut(BaseModel):
    release_id: str
    public: bool
    links: dict[str, str] = Field(description="Where it is read: each format and the map.")


def release_links(base: str, release_id: str) -> dict[str, str]:
    links = {f.value: release_url(base, release_id, f.value) for f in ReleaseFormat}
    return {**links, "map": f"{base}/map#release={release_id}"}


@router.patch(
    "/releases/{release_id}",
    response_model=PublicOut,
    responses=responses(InvalidRequest, Unauthenticated, Forbidden, NotFound),
    summary="Make a release public or private again (admin; spends nothing)",
    description="A public release is read by anyone without a key, in every format and on "
    "`/map`, and listed on `GET /public/releases` and the catalogue (`GET /`). Made "
    "private again, it answers 401 without a key at once on this server process and "
    "within 0.5 s on the others (caches are told to revalidate every use). Nothing else "
    "about the release changes.",
)
def set_public(
    release_id: str,
    body: PublicIn,
    request: Request,
    _: AdminKey,
    session: SessionDep,
    background: BackgroundTasks,
) -> PublicOut:
    found = session.execute(
        update(SlotRelease)
        .where(SlotRelease.public_id == release_id)
        .values(public=body.public)
        .returning(SlotRelease.public_id)
    ).first()
    if found is None:
        raise service.no_release(release_id)
    if body.public:  # its exports rendered after the answer, before its first readers
        database = request.app.state.database
        background.add_task(database.run, exports_store.render_exports, release_id)
    return PublicOut(
        release_id=release_id,
        public=body.public,
        links=release_links(base_url(request), release_id),
    )


@router.get(
    "/public/releases",
    response_model=PublicReleaseList,
    responses=responses(InvalidRequest, NotFound),
    summary="The public releases, newest first (no key needed)",
    description="Each in the shape of `GET /datasets/{dataset_id}/releases` plus its "
    "dataset, `value_unit`, privacy unit, coverage, usefulness and links to every format "
    "and the map. `next` is the `offset` of the next page, or null.",
)
def list_public_releases(
    request: Request,
    session: SessionDep,
    dataset: Annotated[
        int | None, Query(ge=1, le=2**31 - 1, description="Only this dataset's (its id).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Releases per page.")] = 100,
    offset: Annotated[
        int, Query(ge=0, le=2**31 - 1, description="Skip this many (`next` of a page).")
    ] = 0,
) -> Any:
    rows, more = public_page(session, dataset, limit=limit, offset=offset)
    base = base_url(request)
    releases = [PublicRelease(**r, links=release_links(base, r["release_id"])) for r in rows]
    return PublicReleaseList(releases=releases, next=offset + len(rows) if more else None)
