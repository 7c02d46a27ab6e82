"""Issuing and checking API keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.base import to_epsilon
from app.errors import BudgetExhausted, Forbidden, Unauthenticated
from app.keys.models import ROLES, ApiKey
from app.keys.repository import KeyRepository

KEY_PREFIX = "dpg_"


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_key(
    session: Session,
    *,
    name: str,
    role: str,
    epsilon_quota: float | None = None,
    secret: str | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the secret (shown once)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    secret = secret or new_secret()
    key = ApiKey(
        name=name,
        role=role,
        key_hash=hash_key(secret),
        prefix=secret[:10],
        epsilon_quota=None if epsilon_quota is None else to_epsilon(epsilon_quota),
    )
    return KeyRepository(session).add(key), secret


def ensure_key(session: Session, *, secret: str, role: str, name: str) -> ApiKey:
    """Make sure a key with exactly this secret exists (``DPGATE_ADMIN_KEY`` bootstrap)."""
    repo = KeyRepository(session)
    if (existing := repo.by_hash(hash_key(secret))) is not None:
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


_AUTH_TTL_S = 30.0
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
    """A key seen in the last few seconds by this process (keys never change)."""
    hit = _auth_cache.get(digest)
    if hit is not None and time.monotonic() - hit[0] < _AUTH_TTL_S:
        return hit[1]
    return None


def lookup_identity(session: Session, digest: str) -> KeyIdentity:
    """Find the key by its digest in the database (and remember it), or ``Unauthenticated``."""
    key = KeyRepository(session).by_hash(digest)
    # The lookup is by a hash of a high-entropy secret; compare in constant time anyway.
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        raise Unauthenticated("unknown API key")
    identity = KeyIdentity(key.id, key.name, key.role, key.epsilon_quota is not None)
    if len(_auth_cache) >= _AUTH_CACHE_MAX:
        _auth_cache.clear()
    _auth_cache[digest] = (time.monotonic(), identity)
    return identity


def authenticate(session: Session, authorization: str | None) -> KeyIdentity:
    """Resolve ``Authorization: Bearer <key>`` to a key, or raise ``Unauthenticated``."""
    digest = bearer_digest(authorization)
    return cached_identity(digest) or lookup_identity(session, digest)


def require_role(key: KeyIdentity, *roles: str) -> KeyIdentity:
    if key.role not in roles:
        raise Forbidden(f"this needs a key with role {' or '.join(roles)}")
    return key


def spend_quota(session: Session, key: KeyIdentity, epsilon) -> None:
    """Charge ``epsilon`` against the key's quota atomically, or refuse.

    Keys without a quota are not touched: the ledger entries record every key's spend.
    """
    if not key.has_quota:
        return
    if not KeyRepository(session).spend(key.id, to_epsilon(epsilon)):
        raise BudgetExhausted(f"key '{key.name}' would exceed its epsilon quota")
