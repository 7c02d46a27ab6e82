"""The browser tests share one chromium per worker: each page must still start empty."""

from __future__ import annotations

from tests.browser.cdp import OfflineBrowser

STORED = "[localStorage.getItem('k'), sessionStorage.getItem('k'), document.cookie]"


def test_each_page_has_a_browser_context_of_its_own(browser: OfflineBrowser, live_url: str) -> None:
    with browser.page() as first:
        first.navigate(f"{live_url}/healthz")
        first.evaluate(
            "localStorage.setItem('k', 'v'); sessionStorage.setItem('k', 'v');"
            " document.cookie = 'c=1; path=/'"
        )
        assert first.evaluate(STORED) == ["v", "v", "c=1"]
        with browser.page() as second:  # open alongside the first
            second.navigate(f"{live_url}/healthz")
            assert second.evaluate(STORED) == [None, None, ""]
    with browser.page() as third:  # after the first closed
        third.navigate(f"{live_url}/healthz")
        assert third.evaluate(STORED) == [None, None, ""]
        assert third.evaluate("innerWidth") == 1280  # the desktop width, as before
