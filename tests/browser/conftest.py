"""A real HTTP server (uvicorn, in a thread) for the browser, and the browser itself."""

from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from tests.browser.cdp import OfflineBrowser, Page, chromium_binary, offline_browser
from tests.live_server import ThreadedServer


@pytest.fixture(scope="session", autouse=True)
def _chromium_installed() -> None:
    chromium_binary()  # fails every browser test, loudly, when chromium is missing


@pytest.fixture
def live_url(app: FastAPI) -> Iterator[str]:
    """The application (on its test database) served over real HTTP."""
    with ThreadedServer(app) as server:
        yield server.url


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OfflineBrowser]:
    """One chromium per xdist worker; each test's page has a browser context of its own."""
    with offline_browser(tmp_path_factory.mktemp("chromium")) as b:
        yield b


@pytest.fixture
def page(browser: OfflineBrowser) -> Iterator[Page]:
    with browser.page() as p:
        yield p
