"""Typed errors of the dpgate client, one per error ``code`` of the API."""

from __future__ import annotations

from typing import Any

__all__ = [
    "BudgetExhausted",
    "Conflict",
    "DpgateError",
    "Forbidden",
    "IdempotencyConflict",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "RequestTimeout",
    "Unauthenticated",
    "Unavailable",
    "error_from_response",
]


class DpgateError(Exception):
    """An error answer of a dpgate server: its HTTP status, ``code`` and ``message``."""

    code: str = "error"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or type(self).code
        self.body = body or {}

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class InvalidRequest(DpgateError):
    """400 or 422: a parameter is missing, malformed or out of range."""

    code = "invalid_request"


class Unauthenticated(DpgateError):
    """401: the key is missing, unknown or revoked."""

    code = "unauthenticated"


class Forbidden(DpgateError):
    """403: the key's role may not do this."""

    code = "forbidden"


class BudgetExhausted(DpgateError):
    """403: a user's privacy budget or the key's quota would be exceeded.

    ``largest_epsilon`` is the largest epsilon the same request could be answered with
    right now (0 when none), or None when the server did not say."""

    code = "budget_exhausted"

    @property
    def largest_epsilon(self) -> float | None:
        value = self.body.get("largest_epsilon")
        return None if value is None else float(value)


class NotFound(DpgateError):
    """404: no such dataset, grid, release or stored answer."""

    code = "not_found"


class RequestTimeout(DpgateError):
    """408: the request body stalled."""

    code = "request_timeout"


class Conflict(DpgateError):
    """409: the request conflicts with the current state."""

    code = "conflict"


class PayloadTooLarge(DpgateError):
    """413: the body is over the server's limit."""

    code = "payload_too_large"


class IdempotencyConflict(DpgateError):
    """422: an ``Idempotency-Key`` was reused with a different request."""

    code = "idempotency_conflict"


class RateLimited(DpgateError):
    """429: too many requests for this key."""

    code = "rate_limited"


class Unavailable(DpgateError):
    """503: the server or its database is unavailable (retried before it is raised)."""

    code = "unavailable"


_BY_CODE: dict[str, type[DpgateError]] = {
    cls.code: cls
    for cls in (
        InvalidRequest, Unauthenticated, Forbidden, BudgetExhausted, NotFound, RequestTimeout,
        Conflict, PayloadTooLarge, IdempotencyConflict, RateLimited, Unavailable,
    )
}  # fmt: skip
_BY_STATUS: dict[int, type[DpgateError]] = {
    400: InvalidRequest, 401: Unauthenticated, 403: Forbidden, 404: NotFound,
    408: RequestTimeout, 409: Conflict, 413: PayloadTooLarge, 422: InvalidRequest,
    429: RateLimited, 503: Unavailable,
}  # fmt: skip


def error_from_response(status: int, body: Any, text: str = "") -> DpgateError:
    """The typed error of an error answer: by its ``error.code``, else by its status."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code = error["code"]
        cls = _BY_CODE.get(code) or _BY_STATUS.get(status, DpgateError)
        return cls(str(error.get("message", "")), status=status, code=code, body=error)
    cls = _BY_STATUS.get(status, DpgateError)
    return cls(text[:500] or f"HTTP {status}", status=status)
