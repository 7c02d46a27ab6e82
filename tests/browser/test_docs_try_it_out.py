"""A person's first minutes in ``/docs``: Authorize, then *Try it out* and *Execute* on the
statistic endpoints, typing only the required grid and epsilon: each answers 200 (Swagger
UI sends every declared default, so none may conflict with the default mechanism)."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.browser.cdp import Page
from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import CELL_A, load

GRID = {f"u{i}": [float(i % 9 + 1)] * (1 + i % 4) for i in range(14)}
STATISTICS = ("mean", "variance", "user_mean")


def _authorize(page: Page) -> None:
    page.evaluate("document.querySelector('.auth-wrapper .btn.authorize').click()")
    page.wait_for("!!document.querySelector('.modal-ux input#auth-bearer-value')")
    page.evaluate("document.querySelector('.modal-ux input#auth-bearer-value').focus()")
    page.send("Input.insertText", {"text": ADMIN_KEY})
    page.evaluate("document.querySelector('.modal-ux button.authorize').click()")
    page.wait_for("document.querySelector('.modal-ux').innerText.includes('Authorized')")
    page.evaluate("document.querySelector('.modal-ux button.btn-done').click()")


def _type_into(page: Page, op: str, param: str, text: str) -> None:
    field = f"{op}.querySelector('tr[data-param-name=\"{param}\"] input')"
    page.wait_for(f"!!{field}", what=f"the {param} field")
    page.evaluate(f"{field}.focus()")
    page.send("Input.insertText", {"text": text})


def _try_it_out(page: Page, path: str, values: dict[str, str]) -> tuple[str, str]:
    op = (
        f"document.querySelector('.opblock-get .opblock-summary-path[data-path=\"{path}\"]')"
        ".closest('.opblock')"
    )
    page.evaluate(f"{op}.querySelector('.opblock-summary-control').click()")
    page.wait_for(f"!!{op}.querySelector('.try-out__btn')")
    page.evaluate(f"{op}.querySelector('.try-out__btn').click()")
    for param, text in values.items():
        _type_into(page, op, param, text)
    # Swagger UI takes a typed value into its state after a debounce: wait until it holds them
    state = f"JSON.stringify(ui.getState().getIn(['spec', 'meta', 'paths', '{path}', 'get']))"
    held = " && ".join(f'{state}.includes(\'"value":"{text}"\')' for text in values.values())
    page.wait_for(held, what=f"the typed values of {path} in Swagger UI's state")
    page.evaluate(f"{op}.querySelector('.execute').click()")
    status = f"{op}.querySelector('.live-responses-table tr.response .response-col_status')"
    page.wait_for(f"!!{status}", what=f"the answer of {path}")
    curl = page.evaluate(f"{op}.querySelector('.curl-command').innerText")
    return page.evaluate(f"{status}.textContent.trim()"), curl


def test_authorize_try_it_out_execute_answers_200(
    page: Page, live_url: str, client: TestClient
) -> None:
    ds = client.post(
        "/datasets", json={"name": "docs", "value_bound": 10.0, "budget_per_user": 100.0}
    ).json()["id"]
    grid = load(client, ds, {CELL_A: GRID})[CELL_A]
    paths = httpx.get(f"{live_url}/openapi.json", trust_env=False).json()["paths"]
    tried = [s for s in STATISTICS if f"/grids/{{grid_id}}/{s}" in paths]
    assert {"mean", "variance"} <= set(tried)
    page.navigate(f"{live_url}/docs")
    page.wait_for("document.querySelectorAll('.opblock').length > 0")
    _authorize(page)
    for statistic in tried:
        status, curl = _try_it_out(
            page, f"/grids/{{grid_id}}/{statistic}", {"grid_id": grid, "epsilon": "0.5"}
        )
        assert status == "200", (statistic, curl)
        assert "epsilon=0.5" in curl and f"Bearer {ADMIN_KEY}" in curl


@pytest.mark.parametrize("statistic", ["mean", "variance"])
def test_the_docs_send_no_option_the_default_mechanism_refuses(
    live_url: str, statistic: str
) -> None:
    """What Swagger UI pre-fills (each parameter's declared default) is only what every
    mechanism reads: today nothing but ``mechanism`` itself."""
    doc = httpx.get(f"{live_url}/openapi.json", trust_env=False).json()
    params = doc["paths"][f"/grids/{{grid_id}}/{statistic}"]["get"]["parameters"]
    prefilled = {p["name"] for p in params if "default" in p.get("schema", {})}
    assert prefilled == {"mechanism"}
