"""A request's identity (SHA-256 of method, path, sorted query and body digest) and replaying a
reused ``Idempotency-Key``: the same request gets the first answer, another one 422
``IdempotencyConflict``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.requests import Request

from app.idempotency.models import IdempotentRequest
from app.kit.errors import IdempotencyConflict


@dataclass(frozen=True)
class RequestIdentity:
    """Method, path and sorted query parameters of a request (its body comes later)."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, request: Request) -> RequestIdentity:
        return cls(
            request.method.upper(),
            request.url.path,
            tuple(sorted(request.query_params.multi_items())),
        )

    def digest(self, body_sha256: str) -> str:
        """The request's hash, given the SHA-256 (hex) of its body."""
        canonical = json.dumps([self.method, self.path, self.query, body_sha256])
        return hashlib.sha256(canonical.encode()).hexdigest()


class BodyHasher:
    """Passes a body's chunks through, hashing them; :meth:`hexdigest` after the end."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._hash = hashlib.sha256()

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._hash.update(chunk)
            yield chunk

    def drain(self) -> None:
        """Read (and hash) whatever the consumer left unread."""
        for chunk in self._chunks:
            self._hash.update(chunk)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def check_same_request(stored_hash: str | None, request_hash: str) -> None:
    """Refuse a key reused with another request (rows from before the hash was
    stored, ``None``, replay as they always did)."""
    if stored_hash is not None and stored_hash != request_hash:
        raise IdempotencyConflict(
            "this Idempotency-Key was used with a different request; use a new key"
        )


def json_body_sha256(body: Any) -> str:
    """SHA-256 of a parsed JSON body in canonical form (sorted keys, no spaces)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def run_idempotent(
    session: Session,
    scope: str,
    key: str | None,
    request_hash: str,
    run: Callable[[], dict[str, Any]],
) -> tuple[dict[str, Any], bool]:
    """``run()`` once per ``(scope, key)``: ``(answer, replayed)``; the caller holds a lock
    serialising ``scope``."""
    if key is None:
        return run(), False
    previous = session.scalars(
        select(IdempotentRequest).where(
            IdempotentRequest.scope == scope, IdempotentRequest.idempotency_key == key
        )
    ).first()
    if previous is not None:
        check_same_request(previous.request_hash, request_hash)
        return dict(previous.response), True
    answer = run()
    session.add(
        IdempotentRequest(
            scope=scope, idempotency_key=key, request_hash=request_hash, response=answer
        )
    )
    session.flush()
    return answer, False
