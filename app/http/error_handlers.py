"""The one place that maps typed errors (``app.kit.errors``), validation failures and
database failures to HTTP answers of the documented shape."""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from app.kit.errors import DPGateError, InvalidRequest, Unavailable
from app.observability.logs import REQUEST_ID

log = logging.getLogger("dpgate.errors")


def error_response(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
):
    return JSONResponse(
        status_code=status,
        content={"error": {"code": code, "message": message, **(extra or {})}},
        headers=headers,
    )


def _body_fields(request: Request) -> str:
    """The JSON fields the matched route's body requires (for a request without a body)."""
    body = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(body, "field_info", None), "annotation", None)
    fields = getattr(model, "model_fields", {})
    required = [name for name, field in fields.items() if field.is_required()]
    return ", ".join(required) or "see /docs"


#: What a field of a strict JSON body (``app.kit.json_numbers``) takes, by pydantic's type error.
_JSON_KINDS = {
    "float_type": "a JSON number",
    "int_type": "a JSON integer",
    "int_from_float": "a JSON integer",
    "bool_type": "true or false",
    "string_type": "a JSON string",
}


def _sent(value: Any) -> str:
    """A value as the client wrote it (JSON), shortened."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _error_text(err: dict[str, Any]) -> str:
    """One validation error: what the field needs and, for a value, what was sent."""
    given = err.get("input")
    kind = _JSON_KINDS.get(str(err.get("type")))
    if kind is not None and err.get("loc", ("",))[0] == "body":
        fix = ""
        if isinstance(given, str) and kind != "a JSON string":
            fix = " without quotes or underscores" if "_" in given else " without quotes"
        return f"must be {kind}{fix}, not {_sent(given)}"
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "missing" or isinstance(given, dict | list) or given is None:
        return msg
    return f"{msg} (sent {_sent(given)})"


def _validation_message(exc: RequestValidationError, request: Request) -> str:
    parts = []
    for err in exc.errors()[:5]:
        if tuple(err.get("loc", ())) == ("body",) and err.get("type") == "missing":
            parts.append(f"a JSON body is required, with the field(s): {_body_fields(request)}")
            continue
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        text = _error_text(err)
        parts.append(f"{loc}: {text}" if loc else text)
    return "; ".join(parts) or "invalid request"


def _not_found_message(request: Request) -> str:
    path = request.url.path
    if len(path) > 1 and path.endswith("/"):
        bare = {**request.scope, "path": path.rstrip("/") or "/"}
        if any(r.matches(bare)[0] != Match.NONE for r in request.app.router.routes):
            return f"no such route; paths have no trailing slash: {bare['path'][:200]}"
    return "no such route: /docs lists every path of this API"


def _is_unavailable(exc: DBAPIError) -> bool:
    if isinstance(exc, OperationalError) or exc.connection_invalidated:
        return True
    return exc.orig is not None and _driver_is_unavailable(exc.orig)


def _driver_is_unavailable(orig: BaseException) -> bool:
    if isinstance(orig, psycopg.OperationalError):
        return True
    text = str(orig).lower()
    return any(s in text for s in ("read-only", "readonly", "disk", "no space", "locked"))


def _unavailable_message(orig: BaseException | None) -> str:
    """What a 503 from the database says: a time limit is not an outage."""
    if isinstance(orig, psycopg.errors.QueryCanceled):  # statement_timeout
        return "a database statement ran past its time limit; retry later"
    if isinstance(orig, psycopg.errors.LockNotAvailable):  # lock_timeout
        return "a database lock was not granted in time; retry later"
    if isinstance(orig, psycopg.errors.IdleInTransactionSessionTimeout):
        return "the request's transaction stayed idle past its time limit; retry"
    return Unavailable.description


def _database_error(orig: BaseException | None, *, unavailable: bool, data: bool):
    if unavailable:
        log.warning("database unavailable: %s", orig)
        return error_response(
            503, Unavailable.code, _unavailable_message(orig), {"Retry-After": "1"}
        )
    if data:  # a client value the database cannot hold (NUL, range)
        log.warning("value refused by the database: %s", orig)
        return error_response(
            400, InvalidRequest.code, "a value is out of range or holds a NUL character"
        )
    log.error("database error", exc_info=orig)
    return error_response(500, "internal", "internal error")


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> str:
    """The methods some route answers on the request's path (for ``Allow``), found by
    asking the router, as included routers keep their routes to themselves."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] == Match.FULL for r in routes)
    ]
    return ", ".join(allowed)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that give every error the documented shape."""

    @app.exception_handler(DPGateError)
    async def _dpgate(_: Request, exc: DPGateError):
        retry = getattr(exc, "retry_after", 1)
        headers = {"Retry-After": str(retry)} if exc.status_code in (429, 503) else None
        if exc.status_code in (408, 413):  # the body was not read to its end: do not
            headers = {"Connection": "close"}  # let the server drain it for keep-alive
        return error_response(exc.status_code, exc.code, exc.message, headers, exc.extra())

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        # 400 like every other invalid_request (422 is idempotency_conflict's alone)
        return error_response(400, "invalid_request", _validation_message(exc, request))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            return error_response(404, "not_found", _not_found_message(request))
        if exc.status_code == 405:
            allow = _allowed_methods(request)
            return error_response(
                405,
                "invalid_request",
                f"method not allowed on this route; use {allow}",
                {"Allow": allow},
            )
        code = {401: "unauthenticated", 403: "forbidden", 413: "payload_too_large"}.get(
            exc.status_code, "invalid_request" if exc.status_code < 500 else "internal"
        )
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(DBAPIError)
    async def _db(_: Request, exc: DBAPIError):
        return _database_error(
            exc.orig, unavailable=_is_unavailable(exc), data=isinstance(exc, DataError)
        )

    # raised by raw DBAPI cursors (bulk ingestion), without SQLAlchemy's DBAPIError wrapper
    @app.exception_handler(psycopg.Error)
    async def _driver(_: Request, exc: Exception):
        return _database_error(
            exc, unavailable=_driver_is_unavailable(exc), data=isinstance(exc, psycopg.DataError)
        )

    @app.exception_handler(PoolTimeout)
    async def _pool(_: Request, exc: PoolTimeout):
        log.warning("no database connection free: %s", exc)
        return error_response(503, Unavailable.code, "server busy; retry", {"Retry-After": "1"})

    @app.exception_handler(ClientDisconnect)
    async def _disconnect(request: Request, _: ClientDisconnect):
        # Nobody reads this answer; the request's transaction was rolled back.
        log.warning("client disconnected before its request body ended: %s", request.url.path)
        return error_response(400, InvalidRequest.code, "the client disconnected mid-request")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        # runs outside the request-id middleware, still in the request's context
        log.exception("unhandled error", exc_info=exc)
        request_id = REQUEST_ID.get()
        headers = {"X-Request-ID": request_id} if request_id else None
        return error_response(500, "internal", "internal error", headers)
