"""``/docs`` renders in a real browser with no network, and its Authorize button works."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.browser.cdp import Page
from tests.conftest import ADMIN_KEY

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
OPERATIONS_IN_DOM = """[...document.querySelectorAll('.opblock')].map(op => [
    op.querySelector('.opblock-summary-method').textContent.toLowerCase(),
    op.querySelector('.opblock-summary-path').dataset.path])"""
# A cross-origin fetch that needs no CORS: it fails only if the network is unreachable.
FETCH = """fetch({url!r}, {{mode: 'no-cors', cache: 'no-store'}})
    .then(() => 'reached', e => 'failed: ' + e.message)"""


def assert_only_served_by(page: Page, base_url: str) -> None:
    urls = page.requested_urls()
    assert urls, "the browser recorded no request at all"
    outside = [u for u in urls if not u.startswith(base_url + "/") and not u.startswith("data:")]
    assert not outside, f"the page asked for something the server does not serve: {outside}"


def test_the_browser_really_has_no_network_but_the_test_server(page: Page, live_url: str) -> None:
    # On a page without a Content-Security-Policy, so only the network can refuse.
    page.navigate(f"{live_url}/healthz")
    page.wait_for("document.readyState === 'complete'")
    assert page.evaluate(FETCH.format(url=f"{live_url}/healthz"), await_promise=True) == ("reached")
    for url in (
        "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css",
        "http://example.com/",
        "http://1.1.1.1/",
    ):
        got = page.evaluate(FETCH.format(url=url), await_promise=True)
        assert got.startswith("failed"), f"{url} was reachable from the page: {got}"


def test_docs_render_every_operation_offline(page: Page, live_url: str, tmp_path: Path) -> None:
    spec = httpx.get(f"{live_url}/openapi.json", trust_env=False).json()
    expected = sorted(
        [method, path]
        for path, item in spec["paths"].items()
        for method in item
        if method in HTTP_METHODS
    )
    page.navigate(f"{live_url}/docs")
    page.wait_for(
        f"document.querySelectorAll('.opblock').length >= {len(expected)}",
        what=f"Swagger UI to render {len(expected)} operations",
    )
    shot = page.screenshot(tmp_path / "docs.png")
    assert sorted(page.evaluate(OPERATIONS_IN_DOM)) == expected
    assert page.evaluate("document.querySelector('.info .title').textContent").startswith("dpgate")
    assert page.evaluate("!!document.querySelector('.auth-wrapper .btn.authorize')")
    assert_only_served_by(page, live_url)
    assert page.errors() == [], "the docs page logged errors (a blocked asset?)"
    assert shot.stat().st_size > 20_000, "the screenshot looks blank"


def test_docs_authorize_sends_the_bearer_key(page: Page, live_url: str) -> None:
    page.navigate(f"{live_url}/docs")
    page.wait_for("document.querySelectorAll('.opblock').length > 0")
    page.evaluate("document.querySelector('.auth-wrapper .btn.authorize').click()")
    page.wait_for("!!document.querySelector('.modal-ux input#auth-bearer-value')")
    assert "APIKey" in page.evaluate("document.querySelector('.modal-ux').innerText")
    page.evaluate("document.querySelector('.modal-ux input#auth-bearer-value').focus()")
    page.send("Input.insertText", {"text": ADMIN_KEY})  # typed, as a person would
    page.evaluate("document.querySelector('.modal-ux button.authorize').click()")
    page.wait_for("document.querySelector('.modal-ux').innerText.includes('Authorized')")
    page.evaluate("document.querySelector('.modal-ux button.btn-done').click()")

    # Try out GET /datasets, which answers 401 without a key.
    op = (
        "document.querySelector('.opblock-get .opblock-summary-path[data-path=\"/datasets\"]')"
        ".closest('.opblock')"
    )
    page.evaluate(f"{op}.querySelector('.opblock-summary-control').click()")
    page.wait_for(f"!!{op}.querySelector('.try-out__btn')")
    page.evaluate(f"{op}.querySelector('.try-out__btn').click()")
    page.wait_for(f"!!{op}.querySelector('.execute')")
    page.evaluate(f"{op}.querySelector('.execute').click()")
    status = f"{op}.querySelector('.live-responses-table tr.response .response-col_status')"
    page.wait_for(f"!!{status}", what="the tried-out request's answer")
    assert page.evaluate(f"{status}.textContent.trim()") == "200"
    curl = page.evaluate(f"{op}.querySelector('.curl-command').innerText")
    assert f"Authorization: Bearer {ADMIN_KEY}" in curl
    assert_only_served_by(page, live_url)
