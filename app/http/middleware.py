"""Per request: its id (``X-Request-ID``), its metrics and its access log line, as the outermost
middleware. A client's id of 1-128 characters of ``A-Z a-z 0-9 . _ : -`` is kept, else a new one
is made (a per-process random prefix and a counter)."""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.logs import REQUEST_ID
from app.observability.metrics import ANONYMOUS_REFUSALS, REQUEST_SECONDS, REQUESTS, child

__all__ = [
    "REQUEST_ID_FIELD",
    "REQUEST_ID_HEADER",
    "RequestContextMiddleware",
    "count_refusal",
    "incoming_id",
    "new_request_id",
    "valid_request_id",
]

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_FIELD = _HEADER = REQUEST_ID_HEADER.lower().encode()
_VALID_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
UNMATCHED = "unmatched"  # the route label of a request no route matched (bounded cardinality)

access_log = logging.getLogger("dpgate.access")
_PREFIX = os.urandom(8).hex()
_COUNTER = itertools.count(1)


def new_request_id() -> str:
    """32 hex digits, unique across processes (each draws its own prefix)."""
    return f"{_PREFIX}{next(_COUNTER):016x}"


def valid_request_id(raw: bytes | None) -> str | None:
    """``raw`` as a request id if it is acceptable, else None."""
    if raw is None or _VALID_ID.fullmatch(raw) is None:
        return None
    return raw.decode()


def incoming_id(scope: Scope) -> bytes | None:
    """The client's ``X-Request-ID``, as sent."""
    for name, value in scope["headers"]:
        if name == _HEADER:
            return bytes(value)
    return None


#: (method, route template, status) -> its request counter and latency histogram; bounded by
#: the routes (and ``unmatched``), their methods and the statuses they answer.
_counted: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def count_refusal(method: str, reason: str) -> None:
    """A request without a key refused (429) before routing: counted, never logged."""
    child(ANONYMOUS_REFUSALS, reason).inc()
    child(REQUESTS, method, UNMATCHED, "429").inc()


def route_template(scope: Scope) -> str:
    """The path template of the route that served the request (``/grids/{grid_id}/mean``)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = valid_request_id(incoming_id(scope)) or new_request_id()
        # Not reset afterwards: the server runs each request in a task of its own, and
        # the error handler of last resort (outside this middleware) still logs with it.
        REQUEST_ID.set(request_id)
        echoed = (_HEADER, request_id.encode())
        started = time.perf_counter()
        status = 500  # an exception no handler answered

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), echoed]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self._observe(scope, status, time.perf_counter() - started)

    @staticmethod
    def _observe(scope: Scope, status: int, seconds: float) -> None:
        method, route = scope["method"], route_template(scope)
        counted = _counted.get((method, route, status))
        if counted is None:  # the labelled metrics, looked up once per process
            counted = _counted[method, route, status] = (
                REQUESTS.labels(method, route, str(status)),
                REQUEST_SECONDS.labels(method, route),
            )
        counted[0].inc()
        counted[1].observe(seconds)
        if access_log.isEnabledFor(logging.INFO):
            fields: dict[str, Any] = {
                "method": method,
                "path": scope["path"][:200],
                "route": route,
                "status": status,
                "duration_ms": round(seconds * 1000, 3),
            }
            access_log.info(
                "%s %s %d %.1fms", method, fields["path"], status, seconds * 1000, extra=fields
            )
