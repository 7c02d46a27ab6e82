"""Every route checks its key before it takes a database session: a request without a
valid key never holds one, and a request holding one never waits for the key check's
connection (the two pools cannot wait on each other)."""

from __future__ import annotations

from fastapi.routing import APIRoute

from app.http.deps import KeyAuth, get_session


def _api_routes(routes: list) -> list[APIRoute]:
    """Every APIRoute, through included routers too."""
    out: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            out.append(route)
        elif hasattr(route, "original_router"):  # FastAPI's included router
            out += _api_routes(route.original_router.routes)
    return out


def test_the_key_is_checked_before_a_session_is_taken(app) -> None:
    checked = 0
    for route in _api_routes(app.routes):
        calls = [d.call for d in route.dependant.dependencies]
        keys = [i for i, c in enumerate(calls) if isinstance(c, KeyAuth)]
        sessions = [i for i, c in enumerate(calls) if c is get_session]
        if keys and sessions:
            checked += 1
            assert keys[0] < sessions[0], f"{route.path}: session before key"
    assert checked >= 15
