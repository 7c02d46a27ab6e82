r"""Unknown query parameters are refused (400) on every route (API.md, Conventions): a
:class:`CheckedRoute` compares the names with those the route declares (its ``Query`` parameters
and ``openapi_extra``'s), after the key check; a number written with an underscore is refused too.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, get_args

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel

from app.http.deps import KeyAuth
from app.kit.errors import InvalidRequest
from app.kit.json_numbers import parse_json

__all__ = ["CheckedRoute", "declared_query_params"]


def _is_number(annotation: Any) -> bool:
    """``int`` or ``float`` (not ``bool``), optional or not."""
    if annotation in (int, float):
        return True
    return any(_is_number(arg) for arg in get_args(annotation) if arg is not type(None))


def _dependant_query_params(dependant: Dependant, numeric: set[str]) -> set[str]:
    names: set[str] = set()
    for field in dependant.query_params:
        annotation: Any = field.field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for n, f in annotation.model_fields.items():
                names.add(f.alias or n)
                if _is_number(f.annotation):
                    numeric.add(f.alias or n)
        else:
            names.add(field.alias)
            if _is_number(annotation):
                numeric.add(field.alias)
    for sub in dependant.dependencies:
        names |= _dependant_query_params(sub, numeric)
    return names


def _route_query_params(route: APIRoute) -> tuple[frozenset[str], frozenset[str]]:
    """The names of the query parameters ``route`` declares, and of its numeric ones."""
    numeric: set[str] = set()
    names = _dependant_query_params(route.dependant, numeric)
    extra = (route.openapi_extra or {}).get("parameters", ())
    for p in extra:
        if p.get("in") == "query":
            names.add(p["name"])
            if p.get("schema", {}).get("type") in ("number", "integer"):
                numeric.add(p["name"])
    return frozenset(names), frozenset(numeric)


def declared_query_params(route: APIRoute) -> frozenset[str]:
    """The names of the query parameters ``route`` declares (its OpenAPI parameters)."""
    return _route_query_params(route)[0]


def _underscored(request: Request, numeric: frozenset[str]) -> InvalidRequest | None:
    """Python reads ``1_0`` as 10; a number with an underscore is refused instead."""
    params = request.query_params
    for name in sorted(numeric & set(params)):
        for value in params.getlist(name):
            if "_" in value:
                return InvalidRequest(
                    f"{name}: {value[:40]!r} is not a number (write it without underscores)"
                )
    return None


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


class _JsonRequest(Request):
    """A request whose JSON body FastAPI reads with :func:`parse_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class CheckedRoute(APIRoute):
    """An API route that refuses undeclared query parameters (400 naming them) before solving
    dependencies (one set difference) and reads JSON bodies strictly."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        allowed, numeric = _route_query_params(self)  # the route's dependant is built by now

        async def checked(request: Request) -> Response:
            query: bytes = request.scope.get("query_string", b"")
            if query:
                unknown = sorted(set(request.query_params) - allowed)
                if unknown:
                    await _authenticate(self, request)  # 401/403 first: tells strangers nothing
                    raise _refusal(allowed, unknown)
                if b"_" in query and (refusal := _underscored(request, numeric)) is not None:
                    await _authenticate(self, request)
                    raise refusal
            return await handler(_JsonRequest(request.scope, request.receive))

        return checked
