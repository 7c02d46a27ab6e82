"""The statistic routes' handler: a query written plainly skips FastAPI's parameter solving.

``GET /grids/{grid_id}/mean?epsilon=0.5&mechanism=clip`` is the API's hot path. When its query
string holds only ``epsilon`` (digits, an optional fraction and exponent) and ``mechanism``
(lower-case letters and ``_``), each at most once and nothing percent-encoded, the values are
exactly what FastAPI would parse, so the handler reads them itself, checks the key with the
route's own :class:`app.http.deps.KeyAuth` and calls the endpoint. Anything else (options,
repeated or unknown parameters, another spelling of a number, no ``epsilon``) takes the route's
usual path, with its validation and its error messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response

from app.http.deps import KeyAuth
from app.http.query_params import CheckedRoute

#: at most two exponent digits: every such number is a finite float
_EPSILON = re.compile(rb"[0-9]{1,30}(?:\.[0-9]{1,40})?(?:[eE]-?[0-9]{1,2})?")
_MECHANISM = re.compile(rb"[a-z_]{1,40}")


def plain_query(query: bytes) -> tuple[float, str | None] | None:
    """``(epsilon, mechanism or None)`` of a query string of only those two written plainly,
    else None."""
    epsilon: bytes | None = None
    mechanism: bytes | None = None
    for part in query.split(b"&"):
        name, _, value = part.partition(b"=")
        if name == b"epsilon" and epsilon is None and _EPSILON.fullmatch(value):
            epsilon = value
        elif name == b"mechanism" and mechanism is None and _MECHANISM.fullmatch(value):
            mechanism = value
        else:
            return None
    if epsilon is None:
        return None
    return float(epsilon), None if mechanism is None else mechanism.decode()


class StatisticRoute(CheckedRoute):
    """A statistic's route (``grid_id`` in the path; ``epsilon``, ``mechanism`` and the
    mechanisms' options in the query; one :class:`KeyAuth` dependency): a plain query is
    answered without solving dependencies (see the module's note)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        usual = super().get_route_handler()
        calls = [sub.call for sub in self.dependant.dependencies]
        params = {p.alias for p in self.dependant.query_params}
        path = {p.alias for p in self.dependant.path_params}
        if (
            len(calls) != 1
            or not isinstance(calls[0], KeyAuth)
            or params != {"epsilon", "mechanism"}
            or path != {"grid_id"}
        ):
            return usual
        auth, endpoint = calls[0], self.endpoint

        async def handle(request: Request) -> Response:
            plain = plain_query(request.scope.get("query_string", b""))
            if plain is None:
                return await usual(request)
            epsilon, mechanism = plain
            key = await auth(request)
            grid_id = request.scope["path_params"]["grid_id"]
            if mechanism is None:  # the endpoint's default
                return await endpoint(grid_id=grid_id, request=request, key=key, epsilon=epsilon)
            return await endpoint(
                grid_id=grid_id, request=request, key=key, epsilon=epsilon, mechanism=mechanism
            )

        return handle
