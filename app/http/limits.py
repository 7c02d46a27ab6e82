"""Request body limits (size and stall time, ASGI middleware) and a per-key rate limiter."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.kit.errors import PayloadTooLarge, RateLimited, RequestTimeout

UPLOAD_PATH = re.compile(r"^/datasets/[^/]+/records/?$")


class BodyLimitMiddleware:
    """Refuse bodies over the limit with 413, without reading them whole; and bodies
    that stall with 408.

    A declared ``Content-Length`` over the limit is refused before any byte is
    read; a chunked body is counted as it streams and cut off at the limit (the
    endpoint's transaction then rolls back, so nothing is written). While a body is
    incomplete, each wait for its next part is limited to ``read_timeout`` seconds
    (``None``: no limit), and the whole body to ``deadline`` seconds from the request's
    start, so a client that stops sending, or sends a byte now and then, cannot hold a
    database connection or the dataset's upload lock (and so block budget resets)
    for long.
    """

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
                await _send_413(send, limit)
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


async def _send_413(send: Send, limit: int) -> None:
    body = json.dumps(
        {
            "error": {
                "code": PayloadTooLarge.code,
                "message": f"request body is over the limit of {limit} bytes",
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"connection", b"close"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RateLimiter:
    """A token bucket per API key (per server process): ``per_minute`` requests a minute."""

    def __init__(self, per_minute: int) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(per_minute)
        self._buckets: dict[int, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, key_id: int) -> None:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key_id] = (tokens, now)
                raise RateLimited(f"rate limit of {int(self.capacity)} requests a minute reached")
            self._buckets[key_id] = (tokens - 1.0, now)
