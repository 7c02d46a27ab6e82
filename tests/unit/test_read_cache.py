"""``app.http.read_cache.AnonymousReadCache`` around a counting ASGI application: what it keeps,
for how long, what it never keeps, and what empties it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.http.read_cache import AnonymousReadCache


class Counting:
    """Answers ``status`` with a body naming how many requests it served."""

    def __init__(self, status: int = 200, size: int = 10) -> None:
        self.calls, self.status, self.size = 0, status, size

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        body = str(self.calls).encode().ljust(self.size, b".")
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": body})


def ask(app: Any, path: str = "/public/releases", method: str = "GET", **headers: str) -> bytes:
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"",
        "scheme": "http",
        "headers": [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()],
    }
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_kept_for_the_ttl_by_path_and_headers() -> None:
    inner = Counting()
    cache = AnonymousReadCache(inner, ttl=0.2)
    assert ask(cache) == ask(cache) and inner.calls == 1
    ask(cache, "/releases/abc")
    ask(cache, "/releases/abc", if_none_match='"x"')
    ask(cache, "/releases/abc", accept_encoding="zstd")
    ask(cache, "/releases/abc", host="other.example")
    assert inner.calls == 5  # each a different answer
    time.sleep(0.25)
    ask(cache)
    assert inner.calls == 6  # expired


def test_never_kept() -> None:
    inner = Counting()
    cache = AnonymousReadCache(inner)
    for _ in range(2):
        ask(cache, authorization="Bearer k")  # a key holder's
        ask(cache, "/datasets")  # not a public read
        ask(cache, method="HEAD")
    assert inner.calls == 6
    refused = Counting(status=401)
    cache = AnonymousReadCache(refused)
    ask(cache), ask(cache)
    assert refused.calls == 2
    big = Counting(size=2000)
    cache = AnonymousReadCache(big, max_body=1000)
    ask(cache), ask(cache)
    assert big.calls == 2


def test_a_change_with_a_key_empties_it_one_without_does_not() -> None:
    inner = Counting()
    cache = AnonymousReadCache(inner)
    ask(cache)
    ask(cache, "/releases/abc", method="PATCH")  # no key: refused by the app, changes nothing
    ask(cache)
    assert inner.calls == 2
    ask(cache, "/releases/abc", method="PATCH", authorization="Bearer k")
    ask(cache)
    assert inner.calls == 4


def test_bounded() -> None:
    inner = Counting(size=100)
    cache = AnonymousReadCache(inner, max_bytes=250, max_entries=10)
    for path in ("/releases/a", "/releases/b", "/releases/c"):
        ask(cache, path)
    assert cache.store.size <= 250 and len(cache.store.entries) <= 2
    for i in range(20):
        ask(cache, f"/releases/r{i}")
    assert len(cache.store.entries) <= 10
