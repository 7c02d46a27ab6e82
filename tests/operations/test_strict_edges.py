"""Strict at the edges: a JSON body is read as written (no number from ``true`` or ``"5"``,
no last duplicate winning), every refusal says what to fix, and nothing it refuses
changes the ledger."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers import auth, create_key
from tests.integration.grid_fixtures import CELL_A, HOUR, load, make_dataset

GRID = {f"u{i}": [float(i % 7 + 1)] * (1 + i % 3) for i in range(12)}
SLOT = HOUR.strftime("%Y-%m-%dT%H:%M:%S")


def error(resp, status: int = 400, code: str = "invalid_request") -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()["error"]
    assert body["code"] == code, body
    return body["message"]


def post_raw(client: TestClient, path: str, text: str, **kwargs: Any):
    return client.post(path, content=text, headers={"content-type": "application/json"}, **kwargs)


def ledger_rows(client: TestClient, dataset: int) -> list[dict[str, Any]]:
    return client.get(f"/datasets/{dataset}/ledger").json()["users"]


@pytest.fixture
def loaded(pg_client: TestClient) -> int:
    return _loaded(pg_client)


def _loaded(client: TestClient) -> int:
    ds = make_dataset(client, max_epsilon_per_query=20)
    load(client, ds, {CELL_A: GRID})
    return ds


@pytest.fixture(scope="module")
def unspent(shared_pg_client: TestClient) -> int:
    """``loaded`` for the refused release bodies, which share it: none may charge."""
    return _loaded(shared_pg_client)


@pytest.mark.parametrize(
    ("body", "fix"),
    [
        ({"epsilon_quota": True}, "epsilon_quota: must be a JSON number, not true"),
        ({"epsilon_quota": "5"}, 'epsilon_quota: must be a JSON number without quotes, not "5"'),
        ({"name": 7}, "name: must be a JSON string, not 7"),
    ],
)
def test_keys_take_json_types_only(pg_client: TestClient, body: dict, fix: str) -> None:
    before = pg_client.get("/keys").json()["keys"]
    message = error(pg_client.post("/keys", json={"name": "k", "role": "analyst", **body}))
    assert message == fix
    assert pg_client.get("/keys").json()["keys"] == before


def test_datasets_take_json_types_only(pg_client: TestClient) -> None:
    body = {"name": "strict", "value_bound": True, "budget_per_user": True}
    message = error(pg_client.post("/datasets", json=body))
    assert "value_bound: must be a JSON number, not true" in message
    assert "budget_per_user: must be a JSON number, not true" in message
    body = {"name": "strict", "value_bound": 10, "budget_per_user": 1, "h3_resolution": 8.0}
    assert "h3_resolution: must be a JSON integer" in error(pg_client.post("/datasets", json=body))
    body = {"name": "s", "value_bound": 10, "budget_per_user": 1, "value_filters_public": 1}
    assert "must be true or false, not 1" in error(pg_client.post("/datasets", json=body))
    assert pg_client.get("/datasets").json()["datasets"] == []


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('"epsilon": true', "epsilon: must be a JSON number, not true"),
        ('"epsilon": "1"', 'epsilon: must be a JSON number without quotes, not "1"'),
        ('"epsilon": 1, "slots": "24"', 'slots: must be a JSON integer without quotes, not "24"'),
        ('"epsilon": 1, "min_users": "5"', "min_users: must be a JSON integer without quotes"),
        ('"epsilon": 0.5, "epsilon": 7', "the key 'epsilon' appears more than once"),
        ('"epsilon": 1_0', "write numbers without underscores"),
        ('"epsilon": NaN', "NaN is not a JSON number"),
        ('"max_user_cost": 1e-300', "max_user_cost: Input should be greater than or equal to"),
    ],
)
def test_release_bodies_are_read_as_written_and_charge_nothing(
    shared_pg_client: TestClient, unspent: int, text: str, named: str
) -> None:
    pg_client, loaded = shared_pg_client, unspent
    body = f'{{"slot_start": "{SLOT}", {text}}}'
    for path in (f"/datasets/{loaded}/releases", f"/datasets/{loaded}/releases/preview"):
        message = error(post_raw(pg_client, path, body))
        assert named in message, message
    if "1e-300" in text:  # the value sent, not its rounding to the ledger's quantum
        assert "(sent 1e-300)" in message and "0E-12" not in message
    assert ledger_rows(pg_client, loaded) == []
    assert pg_client.get(f"/datasets/{loaded}/releases").json()["releases"] == []


def test_malformed_json_says_what_to_fix(pg_client: TestClient) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert "nests arrays or objects too deeply" in error(post_raw(pg_client, "/keys", deep))
    message = error(post_raw(pg_client, "/keys", '{"name": "k", role: "analyst"}'))
    assert "not valid JSON" in message and "line 1, column 15" in message
    assert "double quotes" in message
    message = error(post_raw(pg_client, "/plans/preview", '{"a": {"b": 1, "b": 2}}'))
    assert "the key 'b' appears more than once" in message


def test_options_on_keys_me_allows_what_it_answers(pg_client: TestClient) -> None:
    resp = pg_client.options("/keys/me")
    assert resp.headers["allow"] == "GET"
    for method in resp.headers["allow"].split(", "):
        assert pg_client.request(method, "/keys/me").status_code == 200
    assert error(pg_client.delete("/keys/me"), 405).endswith("use GET")
    assert pg_client.delete("/keys/07").status_code == 404  # an id's one spelling


def test_an_empty_upload_is_refused_whatever_its_type(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client)
    for content_type in ("text/csv", "application/x-protobuf"):
        resp = pg_client.post(
            f"/datasets/{ds}/records", content=b"", headers={"content-type": content_type}
        )
        assert "empty" in error(resp), content_type
    assert pg_client.get(f"/datasets/{ds}/grids").json()["grids"] == []


def test_refused_releases_leave_no_accounts_behind(pg_client: TestClient, loaded: int) -> None:
    """A release refused for budget or quota creates no budget account: the ledger shows
    exactly what was charged."""
    body = {"slot_start": SLOT, "statistics": ["mean"]}
    over = pg_client.post(f"/datasets/{loaded}/releases", json={**body, "epsilon": 2.0})
    assert error(over, 403, "budget_exhausted")
    assert ledger_rows(pg_client, loaded) == []
    small = auth(create_key(pg_client, "analyst", quota=0.5))
    refused = pg_client.post(
        f"/datasets/{loaded}/releases", json={**body, "epsilon": 0.75}, headers=small
    )
    assert error(refused, 403, "budget_exhausted")
    assert ledger_rows(pg_client, loaded) == []
    done = pg_client.post(f"/datasets/{loaded}/releases", json={**body, "epsilon": 0.25})
    assert done.status_code == 200, done.text
    rows = ledger_rows(pg_client, loaded)
    assert len(rows) == len(GRID) and all(float(r["spent"]) == 0.25 for r in rows)


def test_openapi_declares_the_rules_the_server_enforces(pg_client: TestClient) -> None:
    doc = pg_client.get("/openapi.json").json()
    mean = doc["paths"]["/grids/{grid_id}/mean"]["get"]["parameters"]
    (eps,) = [p for p in mean if p["name"] == "epsilon"]
    assert eps["schema"]["minimum"] == 1e-6
    assert "max_epsilon_per_query" in eps["x-depends-on-dataset"]
    budget = doc["paths"]["/datasets/{dataset_id}/budget"]["get"]["parameters"]
    (window,) = [p for p in budget if p["name"] == "window"]
    assert "budget window" in window["x-depends-on-dataset"]
    release = doc["components"]["schemas"]["ReleaseIn"]["properties"]
    for field in ("epsilon", "max_user_cost"):
        (number,) = [s for s in release[field]["anyOf"] if s.get("type") == "number"]
        assert number["minimum"] == 1e-6, field
    assert "x-depends-on-dataset" in release["h3_resolution"]


def test_epsilon_below_the_declared_minimum_is_refused(pg_client: TestClient, loaded: int) -> None:
    grid = pg_client.get(f"/datasets/{loaded}/grids").json()["grids"][0]["grid_id"]
    for value in ("9.99999e-7", "1e-300"):
        message = error(pg_client.get(f"/grids/{grid}/mean", params={"epsilon": value}))
        assert "at least 0.000001" in message and "sent" in message
    assert pg_client.get(f"/grids/{grid}/mean", params={"epsilon": "1e-6"}).status_code == 200


def test_not_found_says_where_ids_come_from(pg_client: TestClient, loaded: int) -> None:
    assert "GET /datasets/{dataset_id}/grids" in error(
        pg_client.get("/grids/nope/mean", params={"epsilon": 1}), 404, "not_found"
    )
    assert "GET /datasets lists" in error(pg_client.get("/datasets/999"), 404, "not_found")
    assert "e.g. 7" in error(pg_client.get("/datasets/07"), 404, "not_found")
    assert "releases lists them" in error(pg_client.get("/releases/nope"), 404, "not_found")
    message = error(pg_client.get("/keys/me", headers=auth("dpg_nobody")), 401, "unauthenticated")
    assert "dpgate keys create" in message


@pytest.mark.parametrize("spelling", ["2024-03-05T10:30:00", "2024-03-05T10:59:59", "1709634600"])
def test_a_slot_start_off_the_boundary_is_refused_with_the_nearest(
    pg_client: TestClient, loaded: int, spelling: str
) -> None:
    """Each slot has one spelling: off a boundary is a 400 naming both neighbours, and
    nothing is charged (the on-boundary spelling then charges once)."""
    body = {"slot_start": spelling, "epsilon": 0.25, "statistics": ["mean"]}
    for path in (f"/datasets/{loaded}/releases", f"/datasets/{loaded}/releases/preview"):
        message = error(pg_client.post(path, json=body))
        assert "not on a 60-minute slot boundary" in message, message
        assert "2024-03-05T10:00:00+00:00" in message and "2024-03-05T11:00:00+00:00" in message
    assert ledger_rows(pg_client, loaded) == []
    done = pg_client.post(f"/datasets/{loaded}/releases", json={**body, "slot_start": SLOT})
    assert done.status_code == 200, done.text


def test_a_local_time_the_clocks_skip_is_refused(pg_client: TestClient) -> None:
    """02:00 on a spring-forward day does not exist in the zone: refused, not moved to 03:00."""
    ds = make_dataset(pg_client, timezone="America/Chicago")
    body = {"slot_start": "2024-03-10T02:00:00", "epsilon": 0.25, "statistics": ["mean"]}
    message = error(pg_client.post(f"/datasets/{ds}/releases/preview", json=body))
    assert "does not exist in America/Chicago" in message, message
    assert "2024-03-10T01:00:00-06:00" in message and "2024-03-10T03:00:00-05:00" in message
    ok = {**body, "slot_start": "2024-03-10T03:00:00"}  # a real slot: only its emptiness refused
    assert pg_client.post(f"/datasets/{ds}/releases/preview", json=ok).status_code == 404
