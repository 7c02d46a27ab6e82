"""Typed errors, each with its HTTP status, code and description (API.md's error shape);
``app.http.error_handlers`` answers them."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, Field


class DPGateError(Exception):
    """Base of every error dpgate answers on purpose."""

    status_code: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    description: ClassVar[str] = "Internal error"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.description
        super().__init__(self.message)

    def extra(self) -> dict[str, Any]:
        """Fields added to the error body beside ``code`` and ``message``."""
        return {}


class InvalidRequest(DPGateError):
    status_code, code = 400, "invalid_request"
    description = "The request is malformed or a parameter is out of range"


class Unauthenticated(DPGateError):
    status_code, code, description = 401, "unauthenticated", "Missing or unknown API key"


class Forbidden(DPGateError):
    status_code, code, description = 403, "forbidden", "The key's role may not do this"


class BudgetExhausted(DPGateError):
    """A refusal for budget or quota; ``largest_epsilon`` is the largest epsilon the
    same request could be answered with now (0 when none; ``None``: not computed)."""

    status_code = 403
    code = "budget_exhausted"
    description = "The privacy budget (per user, or the key's quota) would be exceeded"

    #: Appended to every refusal's message: what the caller can do next.
    HINT = (
        "; largest_epsilon is the most this request can spend now, GET "
        "/grids/{grid_id}/quote gives the epsilon a target error needs, and an admin can "
        "open a new budget epoch (POST /datasets/{dataset_id}/budget/reset) or raise a "
        "key's quota"
    )

    #: The same for a release: its epsilon is per grid, and a preview charges nothing.
    RELEASE_HINT = (
        "; largest_epsilon is the most each grid can spend now (send it as epsilon; POST "
        "/datasets/{dataset_id}/releases/preview shows a plan without charging), and an "
        "admin can open a new budget epoch (POST /datasets/{dataset_id}/budget/reset) or "
        "raise a key's quota"
    )

    def __init__(
        self,
        message: str | None = None,
        *,
        largest_epsilon: float | None = None,
        release: bool = False,
    ):
        hint = self.RELEASE_HINT if release else self.HINT
        super().__init__((message or self.description) + hint)
        self.largest_epsilon = largest_epsilon

    def extra(self) -> dict[str, Any]:
        return {} if self.largest_epsilon is None else {"largest_epsilon": self.largest_epsilon}


class NotFound(DPGateError):
    status_code, code, description = 404, "not_found", "No such resource"


class Conflict(DPGateError):
    status_code, code, description = 409, "conflict", "The request conflicts with the current state"


class IdempotencyConflict(DPGateError):
    status_code, code = 422, "idempotency_conflict"
    description = "The Idempotency-Key was already used with a different request"


class RequestTimeout(DPGateError):
    status_code, code = 408, "request_timeout"
    description = "The request body stalled for longer than the configured limit"


class PayloadTooLarge(DPGateError):
    status_code, code = 413, "payload_too_large"
    description = "The request body is larger than the configured limit"


class RateLimited(DPGateError):
    status_code, code, description = 429, "rate_limited", "Too many requests for this key"


class Unavailable(DPGateError):
    status_code, code, description = 503, "unavailable", "The database is unavailable; retry later"

    def __init__(self, message: str | None = None, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds, sent as Retry-After


class ErrorDetail(BaseModel):
    code: str
    message: str
    largest_epsilon: float | None = Field(
        default=None,
        description="budget_exhausted only: the largest epsilon the same request could be "
        "answered with now (0 when none).",
    )


class ErrorBody(BaseModel):
    error: ErrorDetail


def responses(*errors: type[DPGateError]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for a route that may raise ``errors`` (plus 400, and what any
    keyed route may answer: a body over the limit or stalled, the rate limit, no database)."""
    out: dict[int | str, dict[str, Any]] = {
        400: {"model": ErrorBody, "description": "Validation error (invalid_request)"}
    }
    always = (InvalidRequest, RequestTimeout, PayloadTooLarge, RateLimited, Unavailable)
    ordered: list[type[DPGateError]] = list(dict.fromkeys((*errors, *always)))
    for err in ordered:
        entry = out.setdefault(err.status_code, {"model": ErrorBody, "description": ""})
        entry["description"] = " / ".join(filter(None, [entry["description"], err.description]))
    return out
