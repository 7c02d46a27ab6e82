r"""Unknown query parameters are refused (400) on every route (API.md, Conventions).

Every feature router's routes are :class:`CheckedRoute`\ s, which compare the request's
query parameter names with those the route declares: the endpoint's own
``Query`` parameters (also those of its dependencies and of pydantic query models) and
the ``in: query`` parameters of its ``openapi_extra`` (the mechanism options of
``/grids/{grid_id}/mean`` and ``/variance``, generated from the registry). So a name
that ``/openapi.json`` does not document is never silently ignored. As everywhere, the
key is checked first: a caller without a valid key (or role) gets 401 (403), not 400.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel

from app.deps import KeyAuth
from app.errors import InvalidRequest

__all__ = ["CheckedRoute", "declared_query_params"]


def _dependant_query_params(dependant: Dependant) -> set[str]:
    names: set[str] = set()
    for field in dependant.query_params:
        annotation: Any = field.field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names.update(f.alias or n for n, f in annotation.model_fields.items())
        else:
            names.add(field.alias)
    for sub in dependant.dependencies:
        names |= _dependant_query_params(sub)
    return names


def declared_query_params(route: APIRoute) -> frozenset[str]:
    """The names of the query parameters ``route`` declares (its OpenAPI parameters)."""
    names = _dependant_query_params(route.dependant)
    extra = (route.openapi_extra or {}).get("parameters", ())
    names.update(p["name"] for p in extra if p.get("in") == "query")
    return frozenset(names)


async def _authenticate(route: APIRoute, request: Request) -> None:
    for sub in route.dependant.dependencies:
        if isinstance(sub.call, KeyAuth):
            await sub.call(request)


def _refusal(allowed: frozenset[str], unknown: list[str]) -> InvalidRequest:
    accepted = ", ".join(sorted(allowed)) or "none"
    named = ", ".join(repr(name[:40]) for name in unknown[:10])
    more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
    return InvalidRequest(
        f"unknown query parameter(s) {named}{more}; this endpoint accepts: {accepted}"
    )


class CheckedRoute(APIRoute):
    """An API route that refuses query parameters it does not declare (400
    ``invalid_request`` naming them), before FastAPI solves its dependencies: the check
    costs one set difference (as a router dependency it cost about 12% of the cached
    answers' throughput, ``benchmarks/api.py``). Every feature router uses it
    (``APIRouter(route_class=CheckedRoute)``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        allowed = declared_query_params(self)  # the route's dependant is built by now

        async def checked(request: Request) -> Response:
            if request.scope.get("query_string"):
                unknown = sorted(set(request.query_params) - allowed)
                if unknown:
                    await _authenticate(self, request)  # 401/403 first: tells strangers nothing
                    raise _refusal(allowed, unknown)
            return await handler(request)

        return checked
