"""FastAPI dependencies as ``Annotated`` aliases.

The request owns the transaction (``app.db.unit`` lists every way to run database
work), committing once **before** the response is sent and rolling back on any
error (an answer therefore never leaves before its charge is durable):

* :data:`SessionDep` — :func:`get_session` yields a session to the endpoint and
  commits after it returns (``scope="function"``); :data:`HeavySessionDep` the same
  in the heavy requests' own capacity (``app.db.capacity``);
* :class:`KeyAuth` — the caller's key, looked up on the query pool from the event
  loop (and cached for half a second).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated

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
    """A request-session dependency inside one of the process's database capacities
    (``app.db.capacity``: ``db_gate`` or ``heavy_gate``)."""

    async def get_session(request: Request) -> AsyncIterator[Session]:
        """The request's session, once the capacity admits the request (a wait bounded
        by the deadline, then 503) and before any connection is taken, so a burst queues
        there rather than deadlocking (requests holding connections while waiting for
        threads held by requests waiting for connections). Commit (or rollback) and
        close run in one hop on their own limiter, never waiting for request threads: a
        transaction holding row locks can always finish. A failed commit raises here,
        before any response is sent.
        """
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


class KeyAuth(HTTPBearer):
    """The request's API key (``Authorization: Bearer <key>``), holding one of ``roles``.

    A security scheme (``APIKey``, HTTP bearer) in the OpenAPI document, so ``/docs``
    offers its *Authorize* button and every operation lists it; one dependency call
    per request (the hot path counts them). A missing or malformed header is 401, a
    key of the wrong role 403, each with the error shape.
    """

    def __init__(self, *roles: str) -> None:
        super().__init__(
            scheme_name="APIKey",
            description="An API key issued by `POST /keys` or `dpgate keys create`.",
            auto_error=False,
        )
        self.roles = roles

    async def __call__(self, request: Request) -> KeyIdentity:  # type: ignore[override]
        digest = bearer_digest(request.headers.get("Authorization"))
        key = cached_identity(digest)
        if key is None:  # a look-up on the query pool, from the event loop
            async with request.app.state.query_pool.connection() as conn:
                key = await lookup_identity(conn, digest)
        limiter = getattr(request.app.state, "rate_limiter", None)
        if limiter is not None:
            limiter.check(key.id)
        return require_role(key, *self.roles) if self.roles else key


AnalystKey = Annotated[KeyIdentity, Depends(KeyAuth("admin", "analyst"))]
AdminKey = Annotated[KeyIdentity, Depends(KeyAuth("admin"))]
#: reads only (datasets, grid listings, budgets, releases): viewers too, who never spend
ReaderKey = Annotated[KeyIdentity, Depends(KeyAuth(*READER_ROLES))]
