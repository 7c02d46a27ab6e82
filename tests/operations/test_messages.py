"""Messages that say how to fix the request, and no 5xx from any ``h3_cell``."""

from __future__ import annotations

import h3
from fastapi.testclient import TestClient

from tests.helpers import auth, make_csv
from tests.integration.grid_fixtures import CELL_A, CELL_B, load, make_dataset

GRID_A = {f"a{i}": [float(i % 9 + 1)] * (1 + i % 3) for i in range(12)}
GRID_B = {"b1": [5.0, 5.0], "b2": [1.0, 2.0, 3.0], "b3": [4.0]}


def error(resp, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()["error"]
    assert body["code"] == code, body
    return body["message"]


def test_any_h3_cell_is_a_listing_or_a_400(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client)
    cell = h3.latlng_to_cell(*CELL_A, 8)
    load(pg_client, ds, {CELL_A: GRID_A})
    path = f"/datasets/{ds}/grids"
    for bad in ("-1", "-9223372036854775808", "18446744073709551616", "f" * 40, "-0x1", "0",
                "zz", " ", "8" + "f" * 15, cell + "0", "1e308", "nan", "٨٨"):  # fmt: skip
        message = error(pg_client.get(path, params={"h3_cell": bad}), 400, "invalid_request")
        assert "h3_cell" in message
    listed = pg_client.get(path, params={"h3_cell": cell.upper()}).json()["grids"]
    assert [g["h3_cell"] for g in listed] == [cell]
    assert pg_client.get("/datasets/1/grids", params={"h3_cell": "-1"}).status_code in (400, 404)


def test_multipart_upload_is_told_to_send_the_raw_body(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client)
    text = make_csv([("u1", "2024-03-05T10:00:00Z", *CELL_A, 3.0)])
    resp = pg_client.post(f"/datasets/{ds}/records", files={"file": ("x.csv", text, "text/csv")})
    message = error(resp, 400, "invalid_request")
    assert "raw request body" in message and "text/csv" in message and "-F" in message
    assert pg_client.get(f"/datasets/{ds}/grids").json()["grids"] == []  # nothing written


def test_reset_without_a_body_names_reason(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client)
    message = error(pg_client.post(f"/datasets/{ds}/budget/reset"), 400, "invalid_request")
    assert "JSON body" in message and "reason" in message
    assert "reason" in error(
        pg_client.post(f"/datasets/{ds}/budget/reset", json={}), 400, "invalid_request"
    )


def test_budget_refusal_points_to_quote_and_reset(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client)  # 1.0 per user
    grid = load(pg_client, ds, {CELL_A: GRID_A})[CELL_A]
    q = {"epsilon": 0.75, "mechanism": "baseline"}
    assert pg_client.get(f"/grids/{grid}/mean", params=q).status_code == 200
    resp = pg_client.get(f"/grids/{grid}/variance", params=q)
    message = error(resp, 403, "budget_exhausted")
    assert "/quote" in message and "/budget/reset" in message and "largest_epsilon" in message
    assert resp.json()["error"]["largest_epsilon"] == 0.25


def test_empty_slot_is_named_in_local_time(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client, timezone="America/Chicago")
    load(pg_client, ds, {CELL_A: GRID_A})
    body = {"slot_start": "2024-03-06T08:00", "epsilon": 0.1, "min_users": 1}  # local, empty
    message = error(pg_client.post(f"/datasets/{ds}/releases", json=body), 404, "not_found")
    assert "2024-03-06T08:00:00-06:00" in message and "America/Chicago" in message, message
    assert "14:00" not in message  # not the UTC time


def test_one_status_for_every_validation_error(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client)
    grid = load(pg_client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})[CELL_A]
    path = f"/grids/{grid}/mean"
    for params in ({}, {"epsilon": "abc"}, {"epsilon": -1}, {"epsilon": "1_0"}, {"limit": 3}):
        error(pg_client.get(path, params=params), 400, "invalid_request")
    for body in ({}, {"name": "x"}, {"name": "x", "role": "nobody"}):
        error(pg_client.post("/keys", json=body), 400, "invalid_request")
    spec = pg_client.get("/openapi.json").json()
    for operations in spec["paths"].values():
        for op in operations.values():
            for status, answer in op["responses"].items():
                if status == "422":  # idempotency_conflict only
                    assert "Idempotency-Key" in answer["description"], op["operationId"]
    assert "HTTPValidationError" not in str(spec)


def test_numbers_with_underscores_are_refused_and_charge_nothing(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client, max_epsilon_per_query=20)
    grid = load(pg_client, ds, {CELL_A: GRID_A})[CELL_A]
    for params in ({"epsilon": "1_0"}, {"epsilon": "0.1", "mechanism": "clip", "m": "1_0"}):
        message = error(pg_client.get(f"/grids/{grid}/mean", params=params), 400, "invalid_request")
        assert "underscore" in message
    assert "underscore" in error(
        pg_client.get(f"/datasets/{ds}/grids", params={"min_users": "1_0"}), 400, "invalid_request"
    )
    assert pg_client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0
    # a key without access still gets 401 first
    assert pg_client.get(f"/grids/{grid}/mean?epsilon=1_0", headers=auth("nope")).status_code == 401


def test_json_numbers_with_underscores_are_refused(pg_client: TestClient) -> None:
    """``{"epsilon": "1_0"}`` was read as epsilon 10; every body refuses it, naming the
    field, and changes nothing."""
    ds = make_dataset(pg_client, max_epsilon_per_query=20)
    load(pg_client, ds, {CELL_A: GRID_A})
    slot = {"slot_start": "2024-03-05T10:00:00Z", "min_users": 2}
    cases = [
        (f"/datasets/{ds}/releases", {**slot, "epsilon": "1_0"}, "epsilon"),
        (f"/datasets/{ds}/releases", {**slot, "max_user_cost": "1_0"}, "max_user_cost"),
        (f"/datasets/{ds}/releases", {**slot, "epsilon": 0.5, "min_users": "1_0"}, "min_users"),
        (f"/datasets/{ds}/releases/preview", {**slot, "epsilon": "1_0"}, "epsilon"),
        (
            "/datasets",
            {"name": "u", "value_bound": 10, "budget_per_user": "1_0"},
            "budget_per_user",
        ),
        ("/keys", {"name": "k", "role": "analyst", "epsilon_quota": "1_0"}, "epsilon_quota"),
        (
            "/plans/preview",
            {"value_bound": 1, "epsilon": "1_0", "occupancy": [[1, 1, 1]]},
            "epsilon",
        ),
    ]
    for path, body, field in cases:
        message = error(pg_client.post(path, json=body), 400, "invalid_request")
        assert field in message and "underscore" in message, (path, message)
    # a count nested in the occupancy list is a JSON integer: "1_0" is not read as 10
    for count in ("1_0", "10", 1.5):
        body = {"value_bound": 1, "epsilon": 1, "occupancy": [[1, 1, 1], [1, 2, count]]}
        message = error(pg_client.post("/plans/preview", json=body), 400, "invalid_request")
        assert "occupancy.1.2" in message and "integer" in message, message
    assert pg_client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0
    assert len(pg_client.get("/datasets").json()) == 1
    # an underscore in a text field is just text; a number written as a string is refused
    made = pg_client.post(
        "/datasets", json={"name": "a_b", "value_bound": "10", "budget_per_user": 1}
    )
    assert "value_bound: must be a JSON number without quotes" in error(
        made, 400, "invalid_request"
    )
    made = pg_client.post(
        "/datasets", json={"name": "a_b", "value_bound": 10, "budget_per_user": 1}
    )
    assert made.status_code == 201, made.text


def test_trailing_slash_is_a_clear_404(pg_client: TestClient) -> None:
    for path, bare in (("/datasets/", "/datasets"), ("/keys/me/", "/keys/me")):
        resp = pg_client.get(path, follow_redirects=False)
        message = error(resp, 404, "not_found")
        assert "trailing slash" in message and bare in message
    message = error(pg_client.get("/nothing/"), 404, "not_found")
    assert message == "no such route: /docs lists every path of this API"


def test_the_last_admin_key_cannot_revoke_itself(pg_client: TestClient) -> None:
    me = pg_client.get("/keys/me").json()["id"]
    message = error(pg_client.delete(f"/keys/{me}"), 409, "conflict")
    assert "last active admin key" in message
    assert pg_client.get("/keys/me").status_code == 200  # still works
    other = pg_client.post("/keys", json={"name": "second", "role": "admin"}).json()
    assert pg_client.delete(f"/keys/{me}").status_code == 204  # another admin remains
    second = {"Authorization": f"Bearer {other['key']}"}
    assert error(pg_client.delete(f"/keys/{other['id']}", headers=second), 409, "conflict")
    assert pg_client.get("/keys/me", headers=second).json()["id"] == other["id"]
