"""Issuing and checking API keys."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from psycopg import AsyncConnection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import budget
from app.db.base import utcnow
from app.keys.models import ROLES, ApiKey
from app.keys.repository import KeyRepository, find_key
from app.keys.schemas import KeyMe, KeyOut
from app.kit.errors import Conflict, Forbidden, NotFound, Unauthenticated

log = logging.getLogger("dpgate.keys")

KEY_PREFIX = "dpg_"
#: who may read datasets, grid listings, budgets and every release
READER_ROLES = ("admin", "analyst", "viewer")


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(
    session: Session,
    *,
    name: str,
    role: str,
    epsilon_quota: float | None = None,
    secret: str | None = None,
) -> tuple[ApiKey, str]:
    """Create a key: the row and its secret (shown once); a quota rounded down."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    secret = secret or KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        name=name,
        role=role,
        key_hash=hash_key(secret),
        prefix=secret[:10],
        epsilon_quota=None if epsilon_quota is None else budget.limit(epsilon_quota),
    )
    return KeyRepository(session).add(key), secret


def ensure_key(session: Session, *, secret: str, role: str, name: str) -> ApiKey:
    """An active key with exactly this secret and role (the ``DPGATE_ADMIN_KEY`` bootstrap wins
    over a revocation or demotion)."""
    repo = KeyRepository(session)
    if (existing := repo.by_hash(hash_key(secret))) is not None:
        if existing.revoked_at is not None or existing.role != role:
            log.warning("key %s (%s) made an active %s again at start-up", existing.id, name, role)
            existing.revoked_at, existing.role = None, role
            session.flush()
        return existing
    try:
        with session.begin_nested():
            return create_key(session, name=name, role=role, secret=secret)[0]
    except IntegrityError:  # another server process created it at the same moment
        if (existing := repo.by_hash(hash_key(secret))) is None:
            raise
        return existing


@dataclass(frozen=True)
class KeyIdentity:
    """Who is calling: what the request needs of its key (never the secret)."""

    id: int
    name: str
    role: str
    has_quota: bool = False


#: How long a process trusts a key it looked up: a revocation or role change reaches
#: every process within this (plus one look-up). One look-up per key, process and
#: half second costs the query path nothing measurable (README, "API benchmark").
_AUTH_TTL_S = 0.5
_AUTH_CACHE_MAX = 10_000
_auth_cache: dict[str, tuple[float, KeyIdentity]] = {}


def bearer_digest(authorization: str | None) -> str:
    """The SHA-256 of the key in ``Authorization: Bearer <key>``, or ``Unauthenticated``."""
    if not authorization:
        raise Unauthenticated("missing Authorization: Bearer <key> header")
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthenticated("use Authorization: Bearer <key>")
    return hash_key(secret.strip())


def cached_identity(digest: str) -> KeyIdentity | None:
    """A key this process looked up in the last :data:`_AUTH_TTL_S` seconds."""
    hit = _auth_cache.get(digest)
    if hit is not None and time.monotonic() - hit[0] < _AUTH_TTL_S:
        return hit[1]
    return None


async def lookup_identity(conn: AsyncConnection[Any], digest: str) -> KeyIdentity:
    """The key of ``digest`` from the database (remembered), or ``Unauthenticated``."""
    key = await find_key(conn, digest)
    # The lookup is by a hash of a high-entropy secret; compare in constant time anyway.
    if key is None or not hmac.compare_digest(key[3], digest):
        raise Unauthenticated(
            "unknown API key: send one an admin created (POST /keys or dpgate keys create)"
        )
    key_id, name, role, _, revoked, has_quota = key
    if revoked:
        raise Unauthenticated("this API key was revoked")
    identity = KeyIdentity(key_id, name, role, has_quota)
    if len(_auth_cache) >= _AUTH_CACHE_MAX:
        _auth_cache.clear()
    _auth_cache[digest] = (time.monotonic(), identity)
    return identity


def forget_key(key_id: int) -> None:
    """Drop a key from this process's cache at once (revoked here)."""
    for digest, (_, identity) in list(_auth_cache.items()):
        if identity.id == key_id:
            _auth_cache.pop(digest, None)


def require_role(key: KeyIdentity, *roles: str) -> KeyIdentity:
    if key.role not in roles:
        raise Forbidden(f"this needs a key with role {' or '.join(roles)}")
    return key


#: What a key spent: its quota's tally, or for a key without one, what the ledger says
#: (``app.ledger.service.key_spent``, handed in by the endpoints: keys sit below the ledger).
SpentOf = Callable[[ApiKey], Decimal]


def key_out(key: ApiKey, spent: Decimal) -> KeyOut:
    return KeyOut(
        id=key.id,
        name=key.name,
        role=key.role,
        prefix=key.prefix,
        epsilon_quota=None if key.epsilon_quota is None else float(key.epsilon_quota),
        epsilon_spent=float(spent),
        revoked=key.revoked_at is not None,
        created_at=key.created_at,
        revoked_at=key.revoked_at,
    )


def list_keys(session: Session, spent_of: SpentOf) -> list[KeyOut]:
    return [key_out(k, spent_of(k)) for k in KeyRepository(session).list_all()]


def key_me(session: Session, identity: KeyIdentity, spent_of: SpentOf) -> KeyMe:
    key = KeyRepository(session).get(identity.id)
    if key is None or key.revoked_at is not None:
        raise Unauthenticated("this API key was revoked")
    spent, quota = spent_of(key), key.epsilon_quota
    return KeyMe(
        **key_out(key, spent).model_dump(include=set(KeyMe.model_fields)),
        epsilon_remaining=None if quota is None else float(budget.remaining(spent, quota)),
    )


def revoke_key(session: Session, key_id: int) -> None:
    """Revoke a key (401 here at once, elsewhere within :data:`_AUTH_TTL_S`); the last active
    admin key is never revoked (409)."""
    repo = KeyRepository(session)
    if repo.get(key_id) is None:
        raise NotFound(f"no key {key_id}")
    if repo.lock_active_admins() == [key_id]:
        raise Conflict(
            f"key {key_id} is the last active admin key; create another admin key first "
            "(POST /keys or dpgate keys create --role admin)"
        )
    repo.revoke(key_id, utcnow())
    forget_key(key_id)
