"""``GET /version`` and ``GET /metrics``, and the hook that installs observability."""

from __future__ import annotations

import hmac
import inspect
from functools import cache
from typing import Any

import anyio
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from sqlalchemy import Engine

from app import __version__
from app.http.deps import KeyAuth
from app.http.middleware import RequestContextMiddleware, route_template
from app.http.query_params import CheckedRoute
from app.kit.errors import (
    BudgetExhausted,
    DPGateError,
    Forbidden,
    NotFound,
    Unauthenticated,
    responses,
)
from app.observability.metrics import BUDGET_REFUSALS, CONTENT_TYPE_LATEST, exposition

router = APIRouter(tags=["operations"], route_class=CheckedRoute)


class VersionOut(BaseModel):
    version: str = Field(description="The installed dpgate package's version.")
    schema_revision: str | None = Field(
        description="The Alembic revision the database is at (null: never migrated)."
    )
    schema_head: str = Field(description="The newest revision this version's code knows.")


@cache
def schema_head() -> str:
    """The newest Alembic revision shipped with this code."""
    from app.db.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    return head or "base"


def database_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@router.get(
    "/version",
    response_model=VersionOut,
    responses=responses(),
    summary="The package version and the database's schema revision",
)
async def get_version(request: Request) -> VersionOut:
    revision = await anyio.to_thread.run_sync(database_revision, request.app.state.engine)
    return VersionOut(version=__version__, schema_revision=revision, schema_head=schema_head())


_bearer = HTTPBearer(auto_error=False, scheme_name="APIKey")
_admin = KeyAuth("admin")


async def _check_scraper(request: Request) -> None:
    """``DPGATE_METRICS``: ``off`` hides /metrics (404), ``public`` shows it to anyone,
    ``admin`` (the default) asks for the ``DPGATE_METRICS_TOKEN`` or an admin key."""
    settings = request.app.state.settings
    if settings.metrics == "off":
        raise NotFound("no such route")
    if settings.metrics == "public":
        return
    token = settings.metrics_token
    given: HTTPAuthorizationCredentials | None = await _bearer(request)
    if (
        token is not None
        and given is not None
        and hmac.compare_digest(given.credentials.encode(), token.get_secret_value().encode())
    ):
        return
    await _admin(request)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}},
        **responses(Unauthenticated, Forbidden, NotFound),
    },
    openapi_extra={"security": [{"APIKey": []}]},  # checked in the endpoint (DPGATE_METRICS)
    summary="Prometheus metrics (DPGATE_METRICS says who may read them)",
    description="Prometheus text format: requests by route template and status, latency "
    "histograms, statistic answers, releases and their durations, epsilon charged per "
    "dataset, budget refusals, database pool use. With the default `DPGATE_METRICS=admin`, "
    "send `Authorization: Bearer` with the `DPGATE_METRICS_TOKEN` or an admin key.",
)
async def metrics(request: Request) -> Response:
    await _check_scraper(request)
    body = await anyio.to_thread.run_sync(exposition, request.app.state)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def install_observability(app: FastAPI) -> None:
    """Request ids, metrics and access lines for every request; /version and /metrics.
    Call after ``install_error_handlers`` (it wraps the budget refusal's handler)."""
    app.add_middleware(RequestContextMiddleware)
    answer_error = app.exception_handlers[DPGateError]

    async def count_refusal(request: Request, exc: Exception) -> Any:
        BUDGET_REFUSALS.labels(route_template(request.scope)).inc()
        answer = answer_error(request, exc)
        return await answer if inspect.isawaitable(answer) else answer

    app.add_exception_handler(BudgetExhausted, count_refusal)
    app.include_router(router)
