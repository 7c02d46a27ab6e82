"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: so does the
database, on every pool a request may use)."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request
from sqlalchemy import Engine, text

from app.http.query_params import CheckedRoute
from app.kit.errors import Unavailable, responses

router = APIRouter(tags=["health"], route_class=CheckedRoute)


@router.get("/healthz", summary="Liveness probe")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _ping_engine(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


@router.get(
    "/readyz",
    summary="Readiness probe: the database answers (else 503 unavailable)",
    responses=responses(Unavailable),
)
async def readyz(request: Request) -> dict[str, str]:
    state = request.app.state
    limit = state.settings.db_connect_timeout_seconds + 1.0
    try:
        with anyio.fail_after(limit):
            await anyio.to_thread.run_sync(_ping_engine, state.engine, abandon_on_cancel=True)
            if state.query_pool is not None:
                async with state.query_pool.connection(timeout=limit) as conn:
                    await conn.execute("SELECT 1")
    except TimeoutError:
        raise Unavailable(f"the database did not answer within {limit:g} s") from None
    return {"status": "ready"}
