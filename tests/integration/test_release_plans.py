"""Release plans (issue 15): min_users, max_user_cost, the free preview, exclusion, and
releases of coarser grids."""

from __future__ import annotations

from collections import Counter
from decimal import ROUND_FLOOR, Decimal

import h3
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.ledger.models import LedgerEntry
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, load, make_dataset
from tests.integration.test_releases import GRIDS

CELL_D = (30.2000, -97.6000)
WITH_SMALL = {
    CELL_A: GRIDS[CELL_A],
    CELL_B: GRIDS[CELL_B],
    CELL_D: {"u1": [4.0] * 5, "u9": [3.0] * 2},
}
Q = Decimal("1e-12")


def _spent(app) -> Counter:
    with app.state.sessionmaker() as s:
        entries = s.scalars(select(LedgerEntry).where(LedgerEntry.kind == "release")).all()
    out: Counter = Counter()
    for e in entries:
        for u in e.users:
            out[u] += e.epsilon
    return out


def _body(**kw) -> dict:
    return {"slot_start": HOUR.isoformat(), "min_users": 1, **kw}


def test_min_users_skips_small_grids_which_charge_nobody(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0)
    load(client, ds, WITH_SMALL)
    body = _body(epsilon=0.5, min_users=3, clip_user=False)
    out = client.post(f"/datasets/{ds}/releases", json=body).json()
    assert out["skipped_grids"] == 1 and len(out["grids"]) == 2
    small = h3.latlng_to_cell(*CELL_D, 8)
    assert small not in {g["h3_cell"] for g in out["grids"]}
    assert out["G1"] == out["K"] == 2  # u1's small grid is not counted
    spent = _spent(app)
    assert len(spent) == 6  # u1..u6; u9, only in the small grid, is never charged
    assert max(spent.values()) == Decimal("1.0") == Decimal(str(out["max_user_cost"]))
    nobody = client.post(f"/datasets/{ds}/releases", json=_body(epsilon=0.5, min_users=50))
    assert nobody.status_code == 200
    assert nobody.json()["grids"] == [] and nobody.json()["skipped_grids"] == 3
    assert _spent(app) == spent


def test_max_user_cost_takes_the_largest_epsilon_that_fits(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0)
    load(client, ds, GRIDS)
    cost = Decimal("0.9")
    out = client.post(f"/datasets/{ds}/releases", json=_body(max_user_cost=0.9)).json()
    # brute force over every candidate C/k: the preview plans at a given epsilon
    fitting = []
    for k in range(1, out["G1"] + 1):
        eps = (cost / k).quantize(Q, rounding=ROUND_FLOOR)
        plan = client.post(f"/datasets/{ds}/releases/preview", json=_body(epsilon=float(eps)))
        if eps * plan.json()["K"] <= cost:
            fitting.append(eps)
    assert Decimal(str(out["epsilon"])) == max(fitting)
    assert Decimal(str(out["max_user_cost"])) <= cost
    assert max(_spent(app).values()) <= cost
    assert max(_spent(app).values()) == Decimal(str(out["max_user_cost"]))


def test_preview_is_free_and_is_the_release_plan(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0)
    load(client, ds, WITH_SMALL)
    body = _body(max_user_cost=1.2, min_users=3, statistics=["mean"], mechanism="clip")
    plan = client.post(f"/datasets/{ds}/releases/preview", json=body)
    assert plan.status_code == 200, plan.text
    plan = plan.json()
    assert client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0
    assert plan["users_over_budget"] == 0 and plan["skipped_grids"] == 1
    assert all(g["expected_error"] > 0 for g in plan["grids"])
    assert all("mean" not in g and "estimate" not in g for g in plan["grids"])
    out = client.post(f"/datasets/{ds}/releases", json=body).json()
    for key in ("G1", "K", "epsilon", "max_user_cost", "skipped_grids"):
        assert out[key] == plan[key], key
    pairs = lambda gs: [(g["grid_id"], g["n_users"], g["n_users_suppressed"]) for g in gs]  # noqa: E731
    assert pairs(out["grids"]) == pairs(plan["grids"])
    for g, p in zip(out["grids"], plan["grids"], strict=True):
        assert g["mean"]["worst_case_error"] == pytest.approx(p["expected_error"])


def test_refusal_and_preview_say_what_still_fits(client: TestClient) -> None:
    ds = make_dataset(client, budget_per_user=0.5)
    load(client, ds, GRIDS)
    body = _body(epsilon=0.4, clip_user=False)
    plan = client.post(f"/datasets/{ds}/releases/preview", json=body).json()
    assert plan["users_over_budget"] == 2  # u1 and u2 are in all three grids
    refused = client.post(f"/datasets/{ds}/releases", json=body)
    assert refused.status_code == 403
    assert refused.json()["error"]["largest_epsilon"] == plan["largest_epsilon"]
    capped = client.post(f"/datasets/{ds}/releases", json=_body(max_user_cost=2.0))
    assert capped.status_code == 403  # a cost cap above the budget left is refused too
    assert 0 < capped.json()["error"]["largest_epsilon"] <= 0.5


def test_exclude_leaves_out_users_who_cannot_pay(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=0.5, on_exhausted="exclude")
    load(client, ds, GRIDS)
    out = client.post(f"/datasets/{ds}/releases", json=_body(epsilon=0.2, clip_user=False))
    assert out.status_code == 200, out.text
    spent = _spent(app)
    assert max(spent.values()) <= Decimal("0.5")
    assert sum(g["n_users_suppressed"] for g in out.json()["grids"]) == 6  # u1, u2 × 3


def test_release_of_coarser_grids(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0)
    load(client, ds, WITH_SMALL)
    body = _body(epsilon=0.3, h3_resolution=6, min_users=2, statistics=["mean"])
    out = client.post(f"/datasets/{ds}/releases", json=body)
    assert out.status_code == 200, out.text
    out = out.json()
    listed = client.get(f"/datasets/{ds}/grids", params={"h3_resolution": 6}).json()["grids"]
    assert out["h3_resolution"] == 6 and out["skipped_grids"] + len(out["grids"]) == len(listed)
    by_id = {g["grid_id"]: g for g in listed}
    for g in out["grids"]:
        assert by_id[g["grid_id"]]["n_users"] == g["n_users"] >= 2
        assert h3.get_resolution(g["h3_cell"]) == 6
    assert max(_spent(app).values()) <= Decimal("0.3") * out["K"]
    grid = out["grids"][0]["grid_id"]
    q = client.get(
        f"/grids/{grid}/mean",
        params={"epsilon": 0.3, "mechanism": "clip", "plan": out["release_id"]},
    )
    assert q.status_code == 200, q.text
