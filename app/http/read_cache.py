"""Answers to readers without a key, kept for half a second per process.

A public release's bodies never change, and the catalogue and the public listing change only when
a release is published, made private, made or deleted. A flood of readers without a key asks for
the same few answers again and again, and each took a look-up of the release, a read of its
stored body and FastAPI's work. :class:`AnonymousReadCache` keeps the complete answers (200 and
304) of ``GET /``, ``GET /public/releases`` and ``GET /releases/{id}`` sent without
``Authorization``, keyed by everything they depend on (path, query string, scheme, host,
``If-None-Match``, ``Accept-Encoding``), for :data:`TTL_SECONDS`. A release made private is
therefore closed within that time on every process (the promise is one second, like a key's
revocation, ``app.keys.service``), and at once on the process that served the change: any request
with a key other than a GET or HEAD forgets every kept answer, before and after it runs (one
without a key changes nothing, and must not be able to empty the store).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

TTL_SECONDS = 0.5
#: the reads kept: the catalogue, the public listing and a release in any format
CACHED_PATHS = re.compile(r"/|/public/releases|/releases/[A-Za-z0-9_-]{1,32}")
_KEYED_HEADERS = (b"host", b"if-none-match", b"accept-encoding")
_AUTHORIZATION = b"authorization"
_CACHED_STATUSES = frozenset({200, 304})


@dataclass
class _Kept:
    expires: float
    start: Message
    body: bytes
    route: Any  # the matched route (for the metrics' route label)


@dataclass
class _Store:
    entries: dict[tuple[Any, ...], _Kept] = field(default_factory=dict)
    size: int = 0
    generation: int = 0  # one more at each clear: an answer begun before it is not kept

    def clear(self) -> None:
        self.entries.clear()
        self.size = 0
        self.generation += 1


def _keyed(scope: Scope) -> bool:
    return any(name == _AUTHORIZATION for name, _ in scope["headers"])


class AnonymousReadCache:
    """See the module's note. ``max_body`` bounds one kept body, ``max_bytes`` and
    ``max_entries`` all of them (past either, everything is forgotten and kept again as asked)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        ttl: float = TTL_SECONDS,
        max_body: int = 4 * 1024 * 1024,
        max_bytes: int = 32 * 1024 * 1024,
        max_entries: int = 4096,
    ) -> None:
        self.app = app
        self.ttl, self.max_body, self.max_bytes = ttl, max_body, max_bytes
        self.max_entries = max_entries
        self.store = _Store()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if method not in ("GET", "HEAD") and _keyed(scope):  # may publish or close a release
            self.store.clear()
            try:
                await self.app(scope, receive, send)
            finally:
                self.store.clear()
            return
        key = self._key(scope) if method == "GET" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        kept = self.store.entries.get(key)
        now = time.monotonic()
        if kept is not None:
            if kept.expires > now:
                if kept.route is not None:
                    scope["route"] = kept.route
                await send(dict(kept.start))
                await send({"type": "http.response.body", "body": kept.body})
                return
            self.store.entries.pop(key, None)
            self.store.size -= len(kept.body)
        await self._answer_and_keep(scope, receive, send, key, now)

    def _key(self, scope: Scope) -> tuple[Any, ...] | None:
        if CACHED_PATHS.fullmatch(scope["path"]) is None:
            return None
        picked: list[bytes | None] = [None] * len(_KEYED_HEADERS)
        for name, value in scope["headers"]:
            if name == _AUTHORIZATION:
                return None
            if name in _KEYED_HEADERS:
                i = _KEYED_HEADERS.index(name)
                if picked[i] is not None:  # a header sent twice: not kept
                    return None
                picked[i] = value
        return (
            scope["path"],
            scope.get("query_string", b""),
            scope.get("scheme"),
            scope.get("root_path", ""),
            *picked,
        )

    async def _answer_and_keep(
        self, scope: Scope, receive: Receive, send: Send, key: tuple[Any, ...], now: float
    ) -> None:
        start: Message | None = None
        generation = self.store.generation
        parts: list[bytes] = []
        size = 0
        keep = True

        async def send_and_keep(message: Message) -> None:
            nonlocal start, size, keep
            if message["type"] == "http.response.start":
                start = dict(message)
                keep = message["status"] in _CACHED_STATUSES and not any(
                    name.lower() == b"set-cookie" for name, _ in message.get("headers", ())
                )
            elif message["type"] == "http.response.body" and keep:
                body = message.get("body", b"")
                size += len(body)
                if size > self.max_body:
                    keep, parts[:] = False, []
                else:
                    parts.append(body)
                    done = not message.get("more_body", False)
                    if done and start is not None and generation == self.store.generation:
                        self._keep(key, start, b"".join(parts), scope.get("route"), now)
            await send(message)

        await self.app(scope, receive, send_and_keep)

    def _keep(
        self, key: tuple[Any, ...], start: Message, body: bytes, route: Any, now: float
    ) -> None:
        store = self.store
        full = len(store.entries) >= self.max_entries
        if full or store.size + len(body) > self.max_bytes:
            store.clear()
        old = store.entries.pop(key, None)
        if old is not None:
            store.size -= len(old.body)
        store.entries[key] = _Kept(now + self.ttl, start, body, route)
        store.size += len(body)
