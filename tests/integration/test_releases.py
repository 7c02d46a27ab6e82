"""Plan previews and whole-timeslot releases through HTTP (issue 6)."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.clip_user import clip_user
from app.ledger.models import LedgerEntry
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, load, make_dataset

CELL_C = (30.3300, -97.8000)
# u1 and u2 roam all three cells (G1 = 3); the heavy u1 dominates each grid's error.
GRIDS = {
    CELL_A: {"u1": [5.0] * 40, "u2": [4.0] * 3, "u3": [6.0] * 2, "u4": [7.0] * 2},
    CELL_B: {"u1": [5.0] * 30, "u2": [3.0] * 2, "u5": [2.0] * 4, "u6": [8.0]},
    CELL_C: {"u1": [5.0] * 35, "u2": [9.0], "u7": [1.0] * 3, "u8": [2.0] * 2},
}


def test_preview_matches_the_engine_and_maps_ids(client: TestClient) -> None:
    occupancy = [
        ["g1", "alice", 40],
        ["g1", "bob", 3],
        ["g1", "carol", 2],
        ["g2", "alice", 30],
        ["g2", "bob", 2],
        ["g2", "dave", 4],
        ["g3", "alice", 35],
        ["g3", "bob", 1],
        ["g3", "erin", 3],
    ]
    body = {"value_bound": 10, "epsilon": 1.0, "occupancy": occupancy}
    got = client.post("/plans/preview", json=body)
    assert got.status_code == 200, got.text
    got = got.json()
    grids = {"g1": 0, "g2": 1, "g3": 2}
    users = {n: i for i, n in enumerate(sorted({u for _, u, _ in occupancy}))}
    plan = clip_user(
        np.array([grids[g] for g, _, _ in occupancy]),
        np.array([users[u] for _, u, _ in occupancy]),
        np.array([c for _, _, c in occupancy]),
        10.0,
        1.0,
    )
    assert (got["G1"], got["K"]) == (plan.G1, plan.K) == (3, plan.K)
    assert got["E"] == pytest.approx(plan.E) and got["E_bar"] == pytest.approx(plan.E_bar)
    names = {v: k for k, v in users.items()}
    gnames = {v: k for k, v in grids.items()}
    assert [tuple(p) for p in got["removed"]] == [(gnames[g], names[u]) for g, u in plan.removed]
    # public counts only: nothing is charged and no dataset is needed
    bad = client.post("/plans/preview", json={**body, "occupancy": [["g", "u", 0]]})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    assert client.post("/plans/preview", json={**body, "epsilon": "nan"}).status_code == 422


def test_release_charges_at_most_K_eps_and_is_cached(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=10.0)
    load(client, ds, GRIDS)
    eps = 0.5
    req = {"slot_start": HOUR.isoformat(), "epsilon": eps, "clip_user": True}
    resp = client.post(f"/datasets/{ds}/releases", json=req)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["G1"] == 3 and 1 <= out["K"] <= out["G1"] and out["cached"] is False
    assert len(out["grids"]) == 3 and out["withheld"] == []
    for g in out["grids"]:
        assert g["mean"]["epsilon"] == pytest.approx(eps / 2)
        assert g["variance"]["epsilon"] == pytest.approx(eps / 2)
        assert g["mean"]["noise_scale"] == pytest.approx(g["mean"]["sensitivity"] / (eps / 2))
    with app.state.sessionmaker() as s:
        entries = s.scalars(select(LedgerEntry).where(LedgerEntry.kind == "release")).all()
    per_user: Counter = Counter()
    for e in entries:
        for u in e.users:
            per_user[u] += e.epsilon
    assert max(per_user.values()) <= Decimal(str(eps)) * out["K"]
    assert max(per_user.values()) == Decimal(str(out["max_user_cost"]))
    again = client.post(f"/datasets/{ds}/releases", json=req).json()
    assert again["cached"] is True and again["release_id"] == out["release_id"]
    budget = client.get(f"/datasets/{ds}/budget").json()
    assert Decimal(str(budget["max_spent"])) == max(per_user.values())


def test_suppressed_users_are_not_charged_again_with_the_plan(client: TestClient) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=10.0)
    ids = load(client, ds, GRIDS)
    out = client.post(
        f"/datasets/{ds}/releases",
        json={"slot_start": HOUR.isoformat(), "epsilon": 0.1, "clip_user": True},
    ).json()
    # at eps = 0.1 noise dominates: dropping the heavy u1 from a grid lowers its error
    assert out["removed"], out
    grid_id, _user = out["removed"][0]
    assert grid_id in ids.values()
    released = {g["grid_id"]: g for g in out["grids"]}
    n_kept = released[grid_id]["mean"]["n_users_charged"]
    q = client.get(
        f"/grids/{grid_id}/mean",
        params={"epsilon": 0.1, "mechanism": "clip", "plan": out["release_id"]},
    ).json()
    assert q["n_users_charged"] == n_kept < q["n_users"]
    unknown = client.get(
        f"/grids/{grid_id}/mean", params={"epsilon": 0.1, "mechanism": "clip", "plan": "nope"}
    )
    assert unknown.status_code == 404


def test_release_refuses_over_budget_and_unknown_slot(client: TestClient) -> None:
    ds = make_dataset(client, budget_per_user=0.5, value_bound=10.0)
    load(client, ds, GRIDS)
    req = {"slot_start": HOUR.isoformat(), "epsilon": 0.4, "clip_user": False}
    resp = client.post(f"/datasets/{ds}/releases", json=req)  # u1 pays 3 × 0.4 > 0.5
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "budget_exhausted"
    assert client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0
    missing = client.post(
        f"/datasets/{ds}/releases", json={**req, "slot_start": "1999-01-01T00:00:00+00:00"}
    )
    assert missing.status_code == 404
    naive = client.post(f"/datasets/{ds}/releases", json={**req, "slot_start": "2024-03-05T10:00"})
    assert naive.status_code == 400
