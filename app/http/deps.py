"""FastAPI dependencies as ``Annotated`` aliases. The request owns its transaction and commits
**before** the response is sent (``app.db.unit``), so no answer leaves before its charge is
durable."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from anyio import to_thread
from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from sqlalchemy.orm import Session

from app.keys.service import (
    READER_ROLES,
    KeyIdentity,
    bearer_digest,
    cached_identity,
    lookup_identity,
    require_role,
)


def _finish(session: Session, ok: bool) -> None:
    try:
        if ok:
            session.commit()
        else:
            session.rollback()
    finally:
        session.close()


def _session_in(capacity: str) -> Callable[[Request], AsyncIterator[Session]]:
    """A request-session dependency in one of the capacities (``db_gate``, ``heavy_gate``)."""

    async def get_session(request: Request) -> AsyncIterator[Session]:
        """The request's session, once the capacity admits it (bounded wait, then 503) and before
        a connection is taken, so bursts queue rather than deadlock. Commit or rollback runs on
        its own limiter; a failed commit raises before any response."""
        state = request.app.state
        async with getattr(state, capacity).held():
            session: Session = state.sessionmaker()
            try:
                yield session
            except BaseException:
                await to_thread.run_sync(_finish, session, False, limiter=state.db_finish)
                raise
            await to_thread.run_sync(_finish, session, True, limiter=state.db_finish)

    return get_session


get_session = _session_in("db_gate")
get_heavy_session = _session_in("heavy_gate")

SessionDep = Annotated[Session, Depends(get_session, scope="function")]
#: For releases, their previews and uploads: a capacity of their own, so that the cheap
#: requests of :data:`SessionDep` never wait behind them.
HeavySessionDep = Annotated[Session, Depends(get_heavy_session, scope="function")]


#: Look-ups of keys in flight in this process, by digest: requests that find a key's cache
#: entry expired at the same moment wait for one look-up rather than each making its own.
_lookups: dict[str, asyncio.Future[KeyIdentity]] = {}


async def _lookup(pool: Any, digest: str) -> KeyIdentity:
    async with pool.connection() as conn:  # on the query pool, from the event loop
        return await lookup_identity(conn, digest)


async def identify(request: Request, digest: str) -> KeyIdentity:
    """The key of ``digest``: from this process's cache, or one look-up shared by every
    request asking for it meanwhile (``Unauthenticated`` for an unknown or revoked key)."""
    key = cached_identity(digest)
    if key is not None:
        return key
    pending = _lookups.get(digest)
    if pending is None or pending.get_loop() is not asyncio.get_running_loop():
        pending = asyncio.ensure_future(_lookup(request.app.state.query_pool, digest))
        _lookups[digest] = pending
        pending.add_done_callback(lambda done: _forget(digest, done))
    return await asyncio.shield(pending)


def _forget(digest: str, done: asyncio.Future[KeyIdentity]) -> None:
    if _lookups.get(digest) is done:
        del _lookups[digest]
    if not done.cancelled():
        done.exception()  # retrieved: every waiter may have gone (cancelled)


class KeyAuth(HTTPBearer):
    """The request's API key (``Authorization: Bearer``) with one of ``roles``: 401 or 403,
    declared as a security scheme in OpenAPI; one dependency call per request."""

    def __init__(self, *roles: str) -> None:
        super().__init__(
            scheme_name="APIKey",
            description="An API key issued by `POST /keys` or `dpgate keys create`.",
            auto_error=False,
        )
        self.roles = roles

    async def __call__(self, request: Request) -> KeyIdentity:  # type: ignore[override]
        key = await identify(request, bearer_digest(request.headers.get("Authorization")))
        limiter = getattr(request.app.state, "rate_limiter", None)
        if limiter is not None:
            limiter.check(key.id)
        return require_role(key, *self.roles) if self.roles else key


AnalystKey = Annotated[KeyIdentity, Depends(KeyAuth("admin", "analyst"))]
AdminKey = Annotated[KeyIdentity, Depends(KeyAuth("admin"))]
#: reads only (datasets, grid listings, budgets, releases): viewers too, who never spend
ReaderKey = Annotated[KeyIdentity, Depends(KeyAuth(*READER_ROLES))]
