"""The upload route: raw records as CSV or a GTFS-Realtime feed, streamed to a worker
thread (``app.uploads.service``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Annotated, Literal

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Header, Query, Request, Response

from app.datasets import service
from app.http.deps import AdminKey, HeavySessionDep
from app.http.query_params import CheckedRoute
from app.idempotency.service import RequestIdentity
from app.ingest.csv_records import ColumnMap
from app.kit.errors import (
    Forbidden,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    Unauthenticated,
    responses,
)
from app.kit.ids import DatasetId
from app.uploads.schemas import UploadResult
from app.uploads.service import UploadOptions, upload_records

router = APIRouter(tags=["datasets"], route_class=CheckedRoute)

ColumnName = Annotated[str, Query(min_length=1, max_length=200)]


MULTIPART_REFUSAL = (
    "a multipart form upload is not read: send the CSV as the raw request body with "
    "Content-Type: text/csv (curl --data-binary @records.csv -H 'Content-Type: text/csv', "
    "not curl -F)"
)
#: Content types read as one serialized GTFS-Realtime ``FeedMessage``.
PROTOBUF_TYPES = frozenset(
    ("application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf")
)
#: Query parameters that only mean something for a CSV.
CSV_ONLY = ("user_col", "time_col", "lat_col", "lon_col", "value_col", "delimiter")
_RECORDS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "text/csv": {
                "schema": {
                    "type": "string",
                    "description": "CSV with a header line, UTF-8 (a BOM is ignored). Streamed.",
                }
            },
            "application/x-protobuf": {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "One serialized GTFS-Realtime FeedMessage (vehicle "
                    "positions): vehicle.vehicle.id is the user, vehicle.timestamp (else the "
                    "header's) the time, position.latitude/longitude the place, "
                    "position.speed (m/s) the value.",
                }
            },
        },
    }
}


@router.post(
    "/datasets/{dataset_id}/records",
    response_model=UploadResult,
    responses=responses(Unauthenticated, Forbidden, NotFound, PayloadTooLarge, IdempotencyConflict),
    openapi_extra=_RECORDS_BODY,
    summary="Upload raw records as CSV or a GTFS-Realtime feed (admin); all or nothing",
    description=(
        "Each data row is accepted, rejected (line and reason; the first 100 reasons are "
        "listed, all are counted), a duplicate of a stored (user, timestamp), or dropped "
        "(`drop_zero`). Timestamps: ISO 8601 with or without offset (naive = the dataset's "
        "time zone) or epoch seconds. A file that cannot be read as a whole is refused "
        "with 400 and nothing is written. With `Idempotency-Key`, a retry of the same request "
        "(method, path, query, body) returns the first answer and writes nothing; the key "
        "reused with a different request is refused (422 `idempotency_conflict`). "
        "`drop_zero=true` and `out_of_range=reject` need a dataset created with "
        "`value_filters_public: true` (else 400). "
        "With `Content-Type: application/x-protobuf` the body is one GTFS-Realtime "
        "`FeedMessage`: each entity is a row (vehicle id = user, `position.speed` = value in "
        "m/s, `vehicle.timestamp` or the header's = time), with the same answer and "
        "guarantees; an error's `line` is then the entity's number (1-based) and its reason "
        "names the entity and vehicle (no vehicle id, no position, no speed, out of range). "
        "A body that is not a FeedMessage is refused with 400; the `*_col` and `delimiter` "
        "parameters are CSV-only."
    ),
)
async def upload(
    dataset_id: DatasetId,
    request: Request,
    response: Response,
    _: AdminKey,
    session: HeavySessionDep,
    user_col: ColumnName = "user_id",
    time_col: ColumnName = "timestamp",
    lat_col: ColumnName = "lat",
    lon_col: ColumnName = "lon",
    value_col: ColumnName = "value",
    drop_zero: bool = False,
    out_of_range: Literal["clamp", "reject"] = "clamp",
    delimiter: Annotated[Literal[",", ";", "\t", "|"], Query()] = ",",
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=200)
    ] = None,
) -> UploadResult:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type.startswith("multipart/"):
        raise InvalidRequest(MULTIPART_REFUSAL)
    is_feed = content_type in PROTOBUF_TYPES
    if is_feed and (given := [p for p in CSV_ONLY if p in request.query_params]):
        raise InvalidRequest(
            f"{', '.join(given)}: CSV-only parameter(s), meaningless for a GTFS-Realtime feed "
            "(Content-Type: application/x-protobuf); leave them out"
        )
    dataset = service.parse_dataset_id(dataset_id)
    options = UploadOptions(
        format="gtfs-rt" if is_feed else "csv",
        columns=ColumnMap(user_col, time_col, lat_col, lon_col, value_col),
        drop_zero=drop_zero,
        out_of_range=out_of_range,
        delimiter=delimiter,
    )
    answer, replayed = await anyio.to_thread.run_sync(
        partial(
            upload_records,
            session,
            dataset,
            _body_chunks(request.stream()),
            options,
            hash_secret=request.app.state.hash_secret,
            idempotency_key=idempotency_key,
            request=RequestIdentity.of(request),
            body_size=_declared_length(request),
        )
    )
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return UploadResult.model_validate(answer)


def _declared_length(request: Request) -> int | None:
    """The body's Content-Length, when declared (the body limit enforces it)."""
    value = request.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


def _body_chunks(stream: AsyncIterator[bytes]) -> Iterator[bytes]:
    """The request body as a blocking iterator for the worker thread, each chunk awaited on the
    event loop when needed; receiving errors (413, a disconnect) propagate."""

    async def pull() -> bytes | None:
        try:
            return await stream.__anext__()
        except StopAsyncIteration:
            return None

    while (chunk := anyio.from_thread.run(pull)) is not None:
        if chunk:
            yield chunk
