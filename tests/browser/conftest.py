"""A real HTTP server (uvicorn, in a thread) for the browser, and the browser itself."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI

from tests.browser.cdp import Page, chromium_binary, offline_browser
from tests.live_server import free_port


class ThreadedServer:
    """uvicorn serving ``app`` on a free loopback port from a background thread."""

    def __init__(self, app: FastAPI) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "ThreadedServer":
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


@pytest.fixture(scope="session", autouse=True)
def _chromium_installed() -> None:
    chromium_binary()  # fails every browser test, loudly, when chromium is missing


@pytest.fixture
def live_url(app: FastAPI) -> Iterator[str]:
    """The application (on its test database) served over real HTTP."""
    with ThreadedServer(app) as server:
        yield server.url


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    with offline_browser(tmp_path) as p:
        yield p
