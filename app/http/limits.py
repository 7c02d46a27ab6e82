"""Request body limits (size and stall time, ASGI middleware), a per-key rate limiter and
the limits of readers without a key (per client address and per process)."""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from collections.abc import Callable

import anyio
import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.http.error_handlers import error_response
from app.http.middleware import (
    REQUEST_ID_FIELD,
    count_refusal,
    incoming_id,
    new_request_id,
    valid_request_id,
)
from app.kit.errors import PayloadTooLarge, RateLimited, RequestTimeout

UPLOAD_PATH = re.compile(r"^/datasets/[^/]+/records/?$")


class BodyLimitMiddleware:
    """413 for a body over the limit (a declared length before reading, a stream when it passes),
    408 when a body stalls (``read_timeout`` per part, ``deadline`` in all), so no client holds a
    connection or upload lock for long."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit_for: Callable[[str], int],
        read_timeout: float | None = None,
        deadline: float | None = None,
    ) -> None:
        self.app = app
        self.limit_for = limit_for
        self.read_timeout = read_timeout
        self.deadline = deadline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > limit
            except ValueError:
                too_big = False
            if too_big:
                message = f"request body is over the limit of {limit} bytes"
                headers = {"Connection": "close"}
                await error_response(413, PayloadTooLarge.code, message, headers)(
                    scope, receive, send
                )
                return
        seen = 0
        complete = False  # after the last part, receive() only waits for a disconnect
        read_timeout, deadline = self.read_timeout, self.deadline
        ends_at = None if deadline is None else time.monotonic() + deadline

        async def counted_receive() -> Message:
            nonlocal seen, complete
            if complete or (read_timeout is None and deadline is None):
                message = await receive()
            else:
                now = time.monotonic()
                waits = [read_timeout, None if ends_at is None else max(0.0, ends_at - now)]
                wait = min(w for w in waits if w is not None)
                try:
                    with anyio.fail_after(wait):
                        message = await receive()
                except TimeoutError:
                    raise RequestTimeout(_timeout_message(read_timeout, deadline)) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
                complete = not message.get("more_body", False)
            else:
                complete = True
            return message

        await self.app(scope, counted_receive, send)


def _timeout_message(read_timeout: float | None, deadline: float | None) -> str:
    limits = []
    if read_timeout is not None:
        limits.append(f"stalled for more than {read_timeout:g} s")
    if deadline is not None:
        limits.append(f"took more than {deadline:g} s in all")
    return f"the request body {' or '.join(limits)}"


class RateLimiter:
    """A token bucket per key: ``per_minute`` a minute, ``burst`` at once; past ``max_buckets``,
    full buckets are forgotten."""

    def __init__(
        self, per_minute: float, *, burst: float | None = None, max_buckets: int = 100_000
    ) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(float(per_minute if burst is None else burst), 1.0)
        self.max_buckets = max_buckets
        self._buckets: dict[object, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allows(self, key: object) -> bool:
        """Take a token for ``key``; False when it has none left."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            allowed = tokens >= 1.0
            self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
            if len(self._buckets) > self.max_buckets:
                full = now - self.capacity / self.rate
                self._buckets = {k: v for k, v in self._buckets.items() if v[1] > full}
        return allowed

    def check(self, key_id: int) -> None:
        if not self.allows(key_id):
            raise RateLimited(f"rate limit of {int(self.capacity)} requests a minute reached")


#: Operations' paths, never limited (probes and scrapers come without a key).
UNLIMITED_PATHS = frozenset({"/healthz", "/readyz", "/version", "/metrics"})
_AUTHORIZATION = b"authorization"


def client_address(scope: Scope) -> str:
    """The client's address (the proxy's ``X-Forwarded-For`` when uvicorn trusts it:
    ``FORWARDED_ALLOW_IPS``); an IPv6 client by its /64, which one host usually holds."""
    client = scope.get("client")
    host = client[0] if client else ""
    if ":" in host:
        try:
            return str(ipaddress.IPv6Network(f"{host}/64", strict=False))
        except ValueError:
            return host
    return host


def _refusal_body(why: str) -> bytes:
    message = f"{why}; retry in a second (a key has its own limit)"
    return orjson.dumps({"error": {"code": RateLimited.code, "message": message}})


_BY_ADDRESS = _refusal_body("too many requests from this address without a key")
_BY_EVERYONE = _refusal_body("too many readers without a key right now")


class AnonymousLimitMiddleware:
    """Readers without a key: ``per_minute`` per client address and ``per_second`` in all, else
    429 ``rate_limited`` before any routing. Requests with ``Authorization`` and the operations'
    paths are not counted.

    Installed outside the request-context middleware, a refusal costs as little as an answer
    can: a body made once, its own request id, one counter (``dpgate_anonymous_refusals`` and
    the 429s of ``dpgate_http_requests``) and no access line, so a flood of readers without a
    key spends its CPU on the server's HTTP parsing, not on dpgate's work per request."""

    def __init__(self, app: ASGIApp, *, per_minute: int, per_second: int) -> None:
        self.app = app
        self.per_address = RateLimiter(per_minute) if per_minute else None
        self.everyone = RateLimiter(per_second * 60.0, burst=per_second) if per_second else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] in UNLIMITED_PATHS
            or any(name == _AUTHORIZATION for name, _ in scope["headers"])
        ):
            await self.app(scope, receive, send)
            return
        if self.per_address is not None and not self.per_address.allows(client_address(scope)):
            body, reason = _BY_ADDRESS, "address"
        elif self.everyone is not None and not self.everyone.allows(None):
            body, reason = _BY_EVERYONE, "everyone"
        else:
            await self.app(scope, receive, send)
            return
        count_refusal(scope["method"], reason)
        request_id = valid_request_id(incoming_id(scope)) or new_request_id()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1"),
            (REQUEST_ID_FIELD, request_id.encode()),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})
