"""Run ``dpgate serve`` in a subprocess (several workers) for end-to-end tests, or an
application in a thread of this process (:class:`ThreadedServer`)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from tests.conftest import ADMIN_KEY


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen
    log: Path

    def kill_hard(self) -> None:
        """``kill -9`` the server and every worker process."""
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


def start_server(
    db_url: str,
    workdir: Path,
    *,
    workers: int = 4,
    port: int | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 60,
    log_level: str = "warning",
) -> LiveServer:
    port = port or free_port()
    env = {
        **os.environ,
        "DPGATE_DATABASE_URL": db_url,
        "DPGATE_ADMIN_KEY": ADMIN_KEY,
        "DPGATE_SECRET_KEY": "test-secret",
        **(extra_env or {}),
    }
    log = workdir / f"server-{port}.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            log_level,
        ],
        env=env,
        cwd=workdir,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = LiveServer(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.kill_hard()
    raise RuntimeError(f"server did not start:\n{log.read_text()[-3000:]}")


#: Servers of more workers than this run one at a time across the test processes: two
#: four-worker servers (up to ~20 connections a worker) together pass Postgres' 100.
ALONE_FROM_WORKERS = 3
_ALONE_LOCK = Path(tempfile.gettempdir()) / "dpgate-tests-many-worker-server.lock"


@contextmanager
def _one_at_a_time(workers: int) -> Iterator[None]:
    """Hold an exclusive lock, shared by every xdist worker, while a server of
    ``ALONE_FROM_WORKERS`` workers or more runs (xdist's loadgroup does not group on
    pytest 9.2, pytest-dev/pytest-xdist#1386)."""
    if workers < ALONE_FROM_WORKERS:
        yield
        return
    with _ALONE_LOCK.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def live_server(db_url: str, workdir: Path, **kwargs: object) -> Iterator[LiveServer]:
    workers = kwargs.get("workers", 4)
    with _one_at_a_time(workers if isinstance(workers, int) else 4):
        server = start_server(db_url, workdir, **kwargs)
        try:
            yield server
        finally:
            server.kill_hard()


def seed_grids(url: str, key: str, name: str, budget: float, grids: dict) -> tuple[int, list[str]]:
    """A dataset (U = 10) made through the API of a live server, with ``grids`` uploaded
    (``tests.integration.grid_fixtures.csv_for``); its id and its grids' ids."""
    from tests.integration.grid_fixtures import csv_for

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        ds = c.post(
            "/datasets", json={"name": name, "value_bound": 10, "budget_per_user": budget}
        ).json()["id"]
        up = c.post(
            f"/datasets/{ds}/records",
            content=csv_for(grids).encode(),
            headers={"content-type": "text/csv"},
        )
        assert up.status_code == 200, up.text
        ids = [g["grid_id"] for g in c.get(f"/datasets/{ds}/grids").json()["grids"]]
    return ds, ids


async def flood_and_kill(
    send: Callable[[int], Awaitable[httpx.Response]],
    n: int,
    kill: Callable[[], None],
    *,
    after: int | None = None,
    watched: Sequence[int] = (),
) -> tuple[dict[int, httpx.Response], list[int]]:
    """Send requests ``0 .. n-1`` at once (``send(i)``), ``kill()`` at one of two moments,
    then wait for the rest: once ``after`` of them were answered 200 (or all are done);
    or, given ``watched`` (the requests sent to the process that is killed), once half of
    those are done, whatever their answers, so that the others are still in flight
    whichever process is faster. Returns the 200 answers by request and the requests the
    kill cut off (an HTTP error instead of an answer)."""
    if (after is None) == (not watched):
        raise ValueError("flood_and_kill: give either after or watched")
    answered: dict[int, httpx.Response] = {}
    cut: list[int] = []

    async def one(i: int) -> None:
        try:
            r = await send(i)
        except httpx.HTTPError:
            cut.append(i)
            return
        if r.status_code == 200:
            answered[i] = r

    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    mine = [tasks[i] for i in watched]

    def due() -> bool:
        if after is None:
            return 2 * sum(t.done() for t in mine) >= len(mine)
        return len(answered) >= after or all(t.done() for t in tasks)

    while not due():
        await asyncio.sleep(0.002)
    kill()
    await asyncio.gather(*tasks)
    return answered, cut


class ThreadedServer:
    """uvicorn serving ``app`` on a free loopback port from a background thread."""

    def __init__(self, app: FastAPI) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
