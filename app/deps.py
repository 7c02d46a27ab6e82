"""FastAPI dependencies as ``Annotated`` aliases.

The request owns the transaction: :func:`get_session` commits once after the
endpoint returns and **before** the response is sent (``scope="function"``), and
rolls back on any error. An answer therefore never leaves before its charge is
durable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from anyio import to_thread
from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from app.config import Settings
from app.keys.service import (
    KeyIdentity,
    bearer_digest,
    cached_identity,
    lookup_identity,
    require_role,
)


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def _finish(session: Session, ok: bool) -> None:
    try:
        if ok:
            session.commit()
        else:
            session.rollback()
    finally:
        session.close()


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request's session, inside the process's database gate.

    The gate admits at most as many requests as the pool has connections, before any
    connection is taken, so a burst queues here rather than deadlocking (requests
    holding connections while waiting for threads held by requests waiting for
    connections). Commit (or rollback) and close run in one hop on their own limiter,
    never waiting for request threads: a transaction holding row locks can always
    finish. A failed commit raises here, before any response is sent.
    """
    state = request.app.state
    async with state.db_gate:
        session: Session = state.sessionmaker()
        try:
            yield session
        except BaseException:
            await to_thread.run_sync(_finish, session, False, limiter=state.db_finish)
            raise
        await to_thread.run_sync(_finish, session, True, limiter=state.db_finish)


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


async def current_key(
    request: Request,
    session: SessionDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> KeyIdentity:
    digest = bearer_digest(authorization)
    key = cached_identity(digest) or await to_thread.run_sync(lookup_identity, session, digest)
    limiter = getattr(request.app.state, "rate_limiter", None)
    if limiter is not None:
        limiter.check(key.id)
    return key


CurrentKey = Annotated[KeyIdentity, Depends(current_key)]


async def analyst_key(key: CurrentKey) -> KeyIdentity:
    return require_role(key, "admin", "analyst")


async def admin_key(key: CurrentKey) -> KeyIdentity:
    return require_role(key, "admin")


AnalystKey = Annotated[KeyIdentity, Depends(analyst_key)]
AdminKey = Annotated[KeyIdentity, Depends(admin_key)]
