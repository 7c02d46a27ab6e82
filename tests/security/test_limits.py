"""Limits: the per-key rate limit, request body sizes, and bodies that stall.

In process for the exact behaviour; against a live ``dpgate serve``
for what only real sockets show (a 2 GB body refused without being read, slow
clients that must not hold up others).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import app.http.limits as limits
from app.config import Settings
from app.db.migrate import upgrade
from app.main import create_app
from tests.conftest import ADMIN_KEY
from tests.live_server import LiveServer, live_server
from tests.security.private_pg import private_postgres
from tests.security.support import (
    ADMIN,
    World,
    assert_error,
    bearer,
    csv_upload_scope,
    populate,
)

HEADER = b"user_id,timestamp,lat,lon,value\n"


def _rows(n: int, start: int = 0, user: str = "bulk") -> bytes:
    return "".join(
        f"{user}{i % 97},{1709632800 + i},30.2672,-97.7431,{i % 10}\n"
        for i in range(start, start + n)
    ).encode()


def _app(settings: Settings, **update: Any) -> FastAPI:
    upgrade(settings.database_url)
    return create_app(settings.model_copy(update=update))


# ------------------------------------------------------------------ rate limit


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_rate_limit_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPGATE_RATE_LIMIT_PER_MINUTE", "7")
    monkeypatch.setenv("DPGATE_BODY_TIMEOUT_SECONDS", "2.5")
    s = Settings()
    assert s.rate_limit_per_minute == 7 and s.body_timeout_seconds == 2.5


def test_per_key_rate_limit(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(limits, "time", clock)
    app = _app(settings, rate_limit_per_minute=5)
    with TestClient(app, raise_server_exceptions=False) as client:
        admin = client.post(
            "/keys", json={"name": "a", "role": "analyst"}, headers=ADMIN
        )  # 1 of the admin's 5
        world = populate(client)  # 4 more admin requests: the admin key is now at its limit
        assert_error(client.get("/datasets", headers=ADMIN), 429, "rate_limited")
        assert admin.status_code == 201
        a, b = bearer(world.analyst_key), bearer(admin.json()["key"])
        grid = world.grid_ids[0]
        for _ in range(5):
            assert client.get("/datasets", headers=a).status_code == 200
        refused = client.get(f"/grids/{grid}/mean", params={"epsilon": 1}, headers=a)
        assert_error(refused, 429, "rate_limited")
        assert refused.headers["retry-after"] == "1"
        # another key is not affected; no key at all is 401, not 429
        assert client.get("/datasets", headers=b).status_code == 200
        assert_error(TestClient(app).get("/datasets"), 401, "unauthenticated")
        # a refused query charged nothing
        clock.now += 60
        budget = client.get(f"/datasets/{world.dataset_id}/budget", headers=a).json()
        assert budget["max_spent"] == 0
        # the bucket refills at 5 a minute: 12 s buys exactly one more request
        clock.now += 60
        for _ in range(5):
            assert client.get("/datasets", headers=a).status_code == 200
        assert_error(client.get("/datasets", headers=a), 429, "rate_limited")
        clock.now += 12.5
        assert client.get("/datasets", headers=a).status_code == 200
        assert_error(client.get("/datasets", headers=a), 429, "rate_limited")


# ------------------------------------------------------------------ body size


def test_declared_length_over_the_limit_is_refused_unread(settings: Settings) -> None:
    app = _app(settings, max_json_body_bytes=1000, max_body_bytes=5000)
    read: list[str] = []

    async def receive() -> dict:
        read.append("receive")
        raise AssertionError("the body was read")

    async def call(path: str, length: int) -> tuple[int, bytes]:
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        scope = csv_upload_scope(path, (b"content-length", str(length).encode()))
        await app(scope, receive, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    for path, length in (("/datasets/1/records", 5001), ("/keys", 1001), ("/keys", 2**31)):
        status, body = anyio.run(call, path, length)
        assert status == 413 and b'"payload_too_large"' in body, (path, body)
    assert not read


def test_streamed_upload_over_the_limit_is_cut_and_writes_nothing(settings: Settings) -> None:
    app = _app(settings, max_body_bytes=200_000)
    with TestClient(app, raise_server_exceptions=False) as client:
        world = populate(client)
        before = client.get(f"/datasets/{world.dataset_id}", headers=ADMIN).json()["n_records"]
        pulled = 0

        def body() -> Iterator[bytes]:  # chunked: no Content-Length
            nonlocal pulled
            yield HEADER
            for k in range(10_000):
                chunk = _rows(100, 100 * k)
                pulled += len(chunk)
                yield chunk

        resp = client.post(
            f"/datasets/{world.dataset_id}/records",
            content=body(),
            headers={**ADMIN, "content-type": "text/csv"},
        )
        assert_error(resp, 413, "payload_too_large")
        after = client.get(f"/datasets/{world.dataset_id}", headers=ADMIN).json()["n_records"]
        assert after == before


# --------------------------------------------------------------- stalled body


def test_stalled_upload_body_is_408_and_releases_the_dataset(settings: Settings) -> None:
    """A client that stops sending mid-body gets 408 after ``body_timeout_seconds``, its
    transaction rolls back, and the dataset's upload lock is free again."""
    app = _app(settings, body_timeout_seconds=0.5)
    with TestClient(app, raise_server_exceptions=False) as client:
        world = populate(client)
    before_rows = _rows(1000, user="stall")

    async def stalled_upload() -> tuple[int, bytes, float]:
        sent: list[dict] = []
        parts = [HEADER + before_rows]

        async def receive() -> dict:
            if parts:
                return {"type": "http.request", "body": parts.pop(), "more_body": True}
            await anyio.sleep(3600)  # the client went quiet
            raise AssertionError("unreachable")

        async def send(message: dict) -> None:
            sent.append(message)

        path = f"/datasets/{world.dataset_id}/records"
        scope = csv_upload_scope(path)
        async with app.router.lifespan_context(app):  # the request gate lives in this loop
            started = time.monotonic()
            with anyio.fail_after(20):
                await app(scope, receive, send)
            elapsed = time.monotonic() - started
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), elapsed

    status, body, elapsed = anyio.run(stalled_upload)
    assert status == 408 and b'"request_timeout"' in body, body
    assert 0.4 < elapsed < 10
    with TestClient(app, raise_server_exceptions=False) as client:
        n = client.get(f"/datasets/{world.dataset_id}", headers=ADMIN).json()["n_records"]
        assert n == 16  # nothing of the stalled upload was written
        started = time.monotonic()
        resp = client.post(
            f"/datasets/{world.dataset_id}/records",
            content=HEADER + _rows(10, user="after"),
            headers={**ADMIN, "content-type": "text/csv"},
        )
        assert resp.status_code == 200 and resp.json()["accepted"] == 10, resp.text
        assert time.monotonic() - started < 5  # not waiting behind a stale lock


def test_a_body_that_keeps_coming_is_not_timed_out(settings: Settings) -> None:
    """The limit is on each stall, not on the whole body: a slow but steady upload works."""
    app = _app(settings, body_timeout_seconds=0.6)
    with TestClient(app, raise_server_exceptions=False) as client:
        world = populate(client)

        def body() -> Iterator[bytes]:
            yield HEADER
            for k in range(5):
                time.sleep(0.3)
                yield _rows(10, 10 * k, user="steady")

        resp = client.post(
            f"/datasets/{world.dataset_id}/records",
            content=body(),
            headers={**ADMIN, "content-type": "text/csv"},
        )
        assert resp.status_code == 200 and resp.json()["accepted"] == 50, resp.text


# ------------------------------------------------------------- live server

TWO_GB = 2 * 1024**3
CHUNK = b"x" * (1 << 20)


@pytest.fixture(scope="module")
def small_limits_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One worker process on a private Postgres, a 4 MB upload limit and a 2 s body
    timeout."""
    tmp = tmp_path_factory.mktemp("limits")
    env = {
        "DPGATE_MAX_BODY_BYTES": str(4 * 1024 * 1024),
        "DPGATE_BODY_TIMEOUT_SECONDS": "2",
    }
    with private_postgres() as pg, live_server(pg.url, tmp, workers=1, extra_env=env) as server:
        yield server


def _world(server: LiveServer) -> World:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        return populate(c)


def _count(server: LiveServer, ds: int) -> int:
    r = httpx.get(f"{server.url}/datasets/{ds}", headers=ADMIN, timeout=30)
    return r.json()["n_records"]


@pytest.mark.slow
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_2gb_streamed_body_is_refused_quickly(
    small_limits_server: LiveServer, declared: bool
) -> None:
    server = small_limits_server
    world = _world(server)
    before = _count(server, world.dataset_id)
    pulled = 0

    def two_gb() -> Iterator[bytes]:
        nonlocal pulled
        yield HEADER
        row = b"u1,2024-03-05T10:00:01Z,30.2672,-97.7431,1\n" * 24_000  # ~1 MB of valid rows
        while pulled < TWO_GB:
            pulled += len(row)
            yield row

    headers = {**ADMIN, "content-type": "text/csv"}
    if declared:
        headers["content-length"] = str(TWO_GB)
    started = time.monotonic()
    with httpx.Client(timeout=60) as c:
        resp = c.post(
            f"{server.url}/datasets/{world.dataset_id}/records", content=two_gb(), headers=headers
        )
    elapsed = time.monotonic() - started
    assert_error(resp, 413, "payload_too_large")
    assert elapsed < 20, elapsed
    assert pulled < 256 * 1024**2, f"{pulled} bytes were pulled: the server read on"
    if declared:
        assert pulled < 64 * 1024**2
    # the server is up, answers others, and wrote nothing
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
    assert _count(server, world.dataset_id) == before
    # the same for a JSON route with a huge declared body
    with httpx.Client(timeout=60) as c:
        resp = c.post(
            f"{server.url}/keys",
            content=iter([b"{" * (1 << 20)] * 2048),
            headers={**ADMIN, "content-type": "application/json", "content-length": str(TWO_GB)},
        )
    assert_error(resp, 413, "payload_too_large")


def _raw_connection(server: LiveServer) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.slow
def test_slow_clients_do_not_block_others(small_limits_server: LiveServer) -> None:
    """One worker process: 30 clients trickle their headers a byte at a time and 5 stall
    mid-upload (holding, until the body timeout, a transaction on the dataset); other
    clients are still answered at once, the stalled uploads get 408, and the dataset
    is writable again right after."""
    server = small_limits_server
    world = _world(server)
    stop = threading.Event()
    tricklers = [_raw_connection(server) for _ in range(30)]

    def trickle() -> None:
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        for i in range(len(request)):
            if stop.is_set():
                return
            for s in tricklers:
                with contextlib.suppress(OSError):
                    s.sendall(request[i : i + 1])
            time.sleep(0.1)

    threading.Thread(target=trickle, daemon=True).start()
    stalled = []
    for k in range(5):
        ds = world.dataset_id
        if k:  # one stalls on the populated dataset, the others on fresh ones
            made = httpx.post(
                f"{server.url}/datasets",
                json={"name": f"stall {k}", "value_bound": 10, "budget_per_user": 1},
                headers=ADMIN,
            )
            assert made.status_code == 201, made.text
            ds = made.json()["id"]
        s = _raw_connection(server)
        body = HEADER + _rows(200, user="stall")
        s.sendall(
            f"POST /datasets/{ds}/records HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {ADMIN_KEY}\r\nContent-Type: text/csv\r\n"
            f"Content-Length: {len(body) + 10_000}\r\n\r\n".encode()
            + body
        )
        stalled.append(s)
    started = time.monotonic()
    try:

        async def others() -> list[float]:
            async with httpx.AsyncClient(base_url=server.url, headers=ADMIN, timeout=30) as c:

                async def one(path: str) -> float:
                    t = time.monotonic()
                    r = await c.get(path)
                    assert r.status_code == 200, r.text
                    return time.monotonic() - t

                paths = ["/healthz", "/datasets", f"/datasets/{world.dataset_id}/grids"] * 10
                return await asyncio.gather(*(one(p) for p in paths))

        latencies = asyncio.run(others())
        assert max(latencies) < 2.0, latencies
        # the stalled uploads are answered 408 once the body timeout (2 s) has passed
        for s in stalled:
            answer = _read_response(s)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            assert b'"request_timeout"' in answer
        assert time.monotonic() - started < 15
        # and nothing of them was written; the dataset takes a new upload at once
        assert _count(server, world.dataset_id) == 16
        t = time.monotonic()
        up = httpx.post(
            f"{server.url}/datasets/{world.dataset_id}/records",
            content=HEADER + _rows(5, user="later"),
            headers={**ADMIN, "content-type": "text/csv"},
            timeout=30,
        )
        assert up.status_code == 200 and up.json()["accepted"] == 5, up.text
        assert time.monotonic() - t < 5
    finally:
        stop.set()
        for s in tricklers + stalled:
            s.close()
