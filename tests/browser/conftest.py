"""A real HTTP server (uvicorn, in a thread) for the browser, and the browser itself."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from tests.browser.cdp import Page, chromium_binary, offline_browser
from tests.live_server import ThreadedServer


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
