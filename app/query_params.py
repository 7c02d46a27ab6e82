"""Unknown query parameters are refused (400) on every route (API.md, Conventions).

One dependency, given to every router where it is included (``app.main``), compares the
request's query parameter names with those its route declares: the endpoint's own
``Query`` parameters (also those of its dependencies and of pydantic query models) and
the ``in: query`` parameters of its ``openapi_extra`` (the mechanism options of
``/grids/{grid_id}/mean`` and ``/variance``, generated from the registry). So a name
that ``/openapi.json`` does not document is never silently ignored. As everywhere, the
key is checked first: a caller without a valid key (or role) gets 401 (403), not 400.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel

from app.deps import KeyAuth
from app.errors import InvalidRequest

__all__ = ["declared_query_params", "refuse_unknown_query_params"]

_ATTRIBUTE = "_dpgate_query_params"  # the names, computed once per route


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


async def refuse_unknown_query_params(request: Request) -> None:
    """400 ``invalid_request`` naming every query parameter the route does not declare."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    allowed: frozenset[str] | None = getattr(route, _ATTRIBUTE, None)
    if allowed is None:
        allowed = declared_query_params(route)
        setattr(route, _ATTRIBUTE, allowed)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        await _authenticate(route, request)  # 401/403 first: validation tells strangers nothing
        accepted = ", ".join(sorted(allowed)) or "none"
        named = ", ".join(repr(name[:40]) for name in unknown[:10])
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        raise InvalidRequest(
            f"unknown query parameter(s) {named}{more}; this endpoint accepts: {accepted}"
        )
