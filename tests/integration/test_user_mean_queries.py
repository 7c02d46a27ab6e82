"""``GET /grids/{grid_id}/user_mean`` through HTTP: the answer's fields follow docs/math.md
§13, the charge, the stored answer, the unit, a 400 that names the field and charges
nobody, and the OpenAPI declaration Try it out calls."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from app.answers.schemas import StatisticAnswer
from tests.integration.grid_fixtures import (
    CELL_A,
    CELL_B,
    GRID_A,
    GRID_B,
    analyst,
    load,
    make_dataset,
)

U = 10.0


def _budget(client: TestClient, ds: int) -> float:
    return float(client.get(f"/datasets/{ds}/budget").json()["max_spent"])


@pytest.mark.parametrize("mechanism", ["auto", "baseline"])
def test_user_mean_answer_charges_once_and_is_stored(client: TestClient, mechanism: str) -> None:
    ds = make_dataset(client, value_unit="m/s")
    grid = load(client, ds, {CELL_A: GRID_A})[CELL_A]
    hdr = analyst(client)
    eps = 0.5
    params = {"epsilon": eps, "mechanism": mechanism}
    resp = client.get(f"/grids/{grid}/user_mean", params=params, headers=hdr)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    StatisticAnswer.model_validate(body)
    L = len(GRID_A)
    assert body["statistic"] == "user_mean" and body["mechanism"] == "baseline"
    assert body["requested_mechanism"] == mechanism and body["unit"] == "m/s"
    assert body["privacy_unit"] == "user" and body["cached"] is False
    assert body["sensitivity"] >= U / L and body["sensitivity"] == pytest.approx(U / L)
    assert body["noise_scale"] >= U / (L * eps)
    assert body["noise_scale"] == pytest.approx(U / (L * eps))
    assert 0 <= body["worst_case_bias"] < 1e-9  # nothing left out: the rounding allowance
    lo, hi = body["ci95"]
    assert 0.0 <= lo <= body["estimate"] <= hi <= U
    half = body["noise_scale"] * math.log(20) + body["worst_case_bias"]
    if 0.0 < body["estimate"] < U:
        assert [lo, hi] == pytest.approx(
            [max(0.0, body["estimate"] - half), min(U, body["estimate"] + half)]
        )
    assert (body["n_users"], body["n_users_charged"]) == (3, 3)
    assert body["details"]["units"] == 3 and body["details"]["units_left_out"] == 0
    assert _budget(client, ds) == pytest.approx(eps)
    again = client.get(f"/grids/{grid}/user_mean", params=params, headers=hdr).json()
    assert again["cached"] is True and again["estimate"] == body["estimate"]
    assert _budget(client, ds) == pytest.approx(eps)  # the stored answer is free


def test_bad_user_mean_requests_name_the_field_and_charge_nobody(client: TestClient) -> None:
    ds = make_dataset(client)
    grid = load(client, ds, {CELL_A: GRID_A})[CELL_A]
    hdr = analyst(client)
    cases = [
        ({"epsilon": 0.5, "mechanism": "clip"}, "mechanism"),
        ({"epsilon": 0.5, "mechanism": "baseline", "objective": "interval"}, "objective"),
        ({"epsilon": 0.5, "m": 3}, "'m'"),
        ({"epsilon": -1}, "epsilon"),
        ({"epsilon": 0.5, "objective": "fast"}, "objective"),
    ]
    for params, field in cases:
        resp = client.get(f"/grids/{grid}/user_mean", params=params, headers=hdr)
        assert resp.status_code in (400, 422), (params, resp.text)
        assert field in resp.text, (params, resp.text)
    assert (
        client.get("/grids/nosuch/user_mean", params={"epsilon": 0.5}, headers=hdr).status_code
        == 404
    )
    assert _budget(client, ds) == 0.0


def test_user_mean_auto_takes_either_objective_with_an_interval(client: TestClient) -> None:
    ds = make_dataset(client)
    grid = load(client, ds, {CELL_A: GRID_A})[CELL_A]
    for objective in ("accuracy", "interval"):
        params = {"epsilon": 0.2, "objective": objective}
        body = client.get(f"/grids/{grid}/user_mean", params=params).json()
        assert body["ci95"] is not None and body["options"] == {"objective": objective}


def test_openapi_declares_user_mean_with_defaults_that_work(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/grids/{grid_id}/user_mean"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert list(params)[:3] == ["grid_id", "epsilon", "mechanism"]
    assert params["mechanism"]["schema"]["enum"] == ["baseline", "auto"]
    assert params["mechanism"]["schema"]["default"] == "auto"
    assert "default" not in params["objective"]["schema"]  # baseline does not read it
    ds = make_dataset(client)
    grid = load(client, ds, {CELL_A: GRID_A})[CELL_A]
    sent = {
        n: p["schema"]["default"] for n, p in params.items() if "default" in p.get("schema", {})
    }
    resp = client.get(f"/grids/{grid}/user_mean", params={**sent, "epsilon": 0.1})
    assert resp.status_code == 200, resp.text


def test_exhausted_units_are_imputed_and_the_bias_says_so(client: TestClient) -> None:
    """``exclude``: a unit out of budget is left out (not read, not charged); its mean is
    imputed at U/2 and the answer's bias bound is U/(2L) (docs/math.md §13.4)."""
    ds = make_dataset(client, on_exhausted="exclude", budget_window="day")
    ids = load(client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})
    spent = client.get(f"/grids/{ids[CELL_B]}/user_mean", params={"epsilon": 0.8}).json()
    assert spent["n_users_charged"] == 2 and spent["privacy_unit"] == "user-day"
    body = client.get(f"/grids/{ids[CELL_A]}/user_mean", params={"epsilon": 0.5}).json()
    assert (body["n_users"], body["n_users_charged"]) == (3, 2)  # u3 is out of budget
    assert body["details"]["units_left_out"] == 1
    assert body["worst_case_bias"] == pytest.approx(U / (2 * 3), abs=1e-9)
    assert body["worst_case_bias"] >= U / (2 * 3)
    assert body["sensitivity"] == pytest.approx(U / 3)  # still U/L: L counts every unit
