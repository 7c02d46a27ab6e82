"""Plan previews and whole-timeslot releases through HTTP (issue 6)."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.planning.clip_user import clip_user
from app.ledger.models import LedgerEntry
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, analyst, load, make_dataset

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
    assert client.post("/plans/preview", json={**body, "epsilon": "nan"}).status_code == 400


def _ledger(app, kind: str = "release") -> Counter:
    with app.state.sessionmaker() as s:
        entries = s.scalars(select(LedgerEntry).where(LedgerEntry.kind == kind)).all()
    per_user: Counter = Counter()
    for e in entries:
        for u in e.users:
            per_user[u] += e.epsilon
    return per_user


def test_release_charges_at_most_K_eps_and_is_cached(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=10.0)
    load(client, ds, GRIDS)
    eps = 0.5
    req = {"slot_start": HOUR.isoformat(), "epsilon": eps, "clip_user": True, "min_users": 1}
    resp = client.post(f"/datasets/{ds}/releases", json=req)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["G1"] == 3 and 1 <= out["K"] <= out["G1"] and out["cached"] is False
    assert len(out["grids"]) == 3 and out["skipped_grids"] == 0 and out["withheld_grids"] == 0
    for g in out["grids"]:
        assert g["slot_start"] == "2024-03-05T10:00:00+00:00" and g["n_users"] == 4
        assert g["mean"]["epsilon"] == pytest.approx(eps / 2)
        assert g["variance"]["epsilon"] == pytest.approx(eps / 2)
        # auto's mean spends part of its eps on a private window, the rest on Laplace noise
        eps_noise = g["mean"]["details"].get("eps_noise", eps / 2)
        assert eps_noise <= eps / 2
        assert g["mean"]["noise_scale"] == pytest.approx(g["mean"]["sensitivity"] / eps_noise)
        assert g["mean"]["requested_mechanism"] == "auto"
    per_user = _ledger(app)
    assert max(per_user.values()) <= Decimal(str(eps)) * out["K"]
    assert max(per_user.values()) == Decimal(str(out["max_user_cost"]))
    again = client.post(f"/datasets/{ds}/releases", json=req).json()
    assert again["cached"] is True and again["release_id"] == out["release_id"]
    budget = client.get(f"/datasets/{ds}/budget").json()
    assert Decimal(str(budget["max_spent"])) == max(per_user.values())


def test_suppressions_are_counts_and_the_plan_is_reused(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=10.0)
    ids = load(client, ds, GRIDS)
    req = {"slot_start": HOUR.isoformat(), "epsilon": 0.1, "min_users": 1, "mechanism": "clip"}
    out = client.post(f"/datasets/{ds}/releases", json=req).json()
    # at eps = 0.1 noise dominates: dropping the heavy u1 from a grid lowers its error
    suppressed = [g for g in out["grids"] if g["n_users_suppressed"]]
    assert suppressed, out
    grid_id = suppressed[0]["grid_id"]
    assert grid_id in ids.values()
    n_kept = suppressed[0]["mean"]["n_users_charged"]
    assert n_kept == 4 - suppressed[0]["n_users_suppressed"]
    q = client.get(
        f"/grids/{grid_id}/mean",
        params={"epsilon": 0.1, "mechanism": "clip", "plan": out["release_id"]},
    ).json()
    assert q["n_users_charged"] == n_kept < q["n_users"]
    unknown = client.get(
        f"/grids/{grid_id}/mean", params={"epsilon": 0.1, "mechanism": "clip", "plan": "nope"}
    )
    assert unknown.status_code == 404
    # analysts never see user identifiers or their hashes, in the answer or stored
    hashes = {u["user"] for u in client.get(f"/datasets/{ds}/ledger").json()["users"]}
    stored = client.get(f"/releases/{out['release_id']}").text
    for text in (json.dumps(out), stored):
        assert not any(h in text for h in hashes)
        assert all(f'"u{i}"' not in text for i in range(1, 9))


def test_release_refuses_over_budget_with_the_largest_epsilon(client: TestClient) -> None:
    ds = make_dataset(client, budget_per_user=0.5, value_bound=10.0)
    load(client, ds, GRIDS)
    req = {"slot_start": HOUR.isoformat(), "epsilon": 0.4, "clip_user": False, "min_users": 1}
    resp = client.post(f"/datasets/{ds}/releases", json=req)  # u1 pays 3 × 0.4 > 0.5
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "budget_exhausted"
    largest = resp.json()["error"]["largest_epsilon"]
    assert largest == pytest.approx(0.5 / 3, abs=1e-11) and largest <= 0.5 / 3
    assert client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0
    fits = client.post(f"/datasets/{ds}/releases", json={**req, "epsilon": largest})
    assert fits.status_code == 200, fits.text
    assert client.get(f"/datasets/{ds}/budget").json()["max_spent"] <= 0.5
    missing = client.post(
        f"/datasets/{ds}/releases", json={**req, "slot_start": "1999-01-01T00:00:00+00:00"}
    )
    assert missing.status_code == 404
    naive = {**req, "epsilon": largest, "slot_start": "2024-03-05T10:00"}  # local time (UTC)
    again = client.post(f"/datasets/{ds}/releases", json=naive).json()
    assert again["cached"] is True and again["release_id"] == fits.json()["release_id"]


@pytest.fixture(scope="module")
def unspent(shared_client: TestClient) -> int:
    """A dataset with GRIDS for the refused releases, which share it: none may spend."""
    ds = make_dataset(shared_client, value_bound=10.0)
    load(shared_client, ds, GRIDS)
    return ds


@pytest.mark.parametrize(
    "change",
    [
        {"slot_start": "0001-01-01T00:00:00+14:00"},
        {"slot_start": "9999-12-31T23:59:59-14:00"},
        {"slot_start": "not a time"},
        {"mechanism": "levy", "statistics": ["mean", "variance"]},
        {"mechanism": "nope"},
        {"h3_resolution": 9},
        {"slot_minutes": 90},
        {"slot_minutes": 7},
        {"epsilon": 100.0},
    ],
)
def test_release_bad_input_is_400(shared_client: TestClient, unspent: int, change: dict) -> None:
    client, ds = shared_client, unspent
    req = {"slot_start": HOUR.isoformat(), "epsilon": 0.1, "min_users": 1, **change}
    for path in ("releases", "releases/preview"):
        resp = client.post(f"/datasets/{ds}/{path}", json=req)
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json()["error"]["code"] == "invalid_request"
    assert client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0


def test_release_needs_exactly_one_budget(client: TestClient) -> None:
    ds = make_dataset(client, value_bound=10.0)
    base = {"slot_start": HOUR.isoformat(), "min_users": 1}
    for extra in ({}, {"epsilon": 0.1, "max_user_cost": 1.0}, {"epsilon": 0.1, "x": 1}):
        resp = client.post(f"/datasets/{ds}/releases", json={**base, **extra})
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request"
    resp = client.post(f"/datasets/{ds}/releases?x=1", json={**base, "epsilon": 0.1})
    assert resp.status_code == 400


def test_stored_release_and_formats(client: TestClient) -> None:
    ds = make_dataset(client, value_bound=10.0, budget_per_user=10.0)
    load(client, ds, GRIDS)
    req = {"slot_start": HOUR.isoformat(), "epsilon": 0.5, "min_users": 1, "statistics": ["mean"]}
    out = client.post(f"/datasets/{ds}/releases", json=req).json()
    stored = client.get(f"/releases/{out['release_id']}", headers=analyst(client))
    assert stored.status_code == 200
    body = stored.json()
    assert body["cached"] is True
    assert {k: v for k, v in body.items() if k != "cached"} == {
        k: v for k, v in out.items() if k != "cached"
    }
    for key in ("release_id", "G1", "K", "epsilon", "max_user_cost", "grids", "skipped_grids"):
        assert key in body
    for g in body["grids"]:
        assert set(g) >= {"grid_id", "h3_cell", "slot_start", "n_users", "mean"}
        assert "variance" not in g
        assert 0 <= g["mean"]["estimate"] <= 10
        ci = g["mean"]["ci95"]
        assert (ci is None and g["mean"]["ci95_note"]) or 0 <= ci[0] <= ci[1] <= 10
    assert client.get("/releases/nope").status_code == 404
    assert client.get(f"/releases/{out['release_id']}?format=xml").status_code in (400, 422)
    geo = client.get(f"/releases/{out['release_id']}?format=geojson")
    assert geo.status_code == 200 and geo.headers["content-type"].startswith("application/geo+json")
    assert len(geo.json()["features"]) == len(body["grids"])
    rows = client.get(f"/releases/{out['release_id']}?format=csv")
    assert rows.status_code == 200 and rows.headers["content-type"].startswith("text/csv")
    assert len(rows.text.strip().splitlines()) == 1 + len(body["grids"])
    assert client.get(f"/releases/{out['release_id']}?fmt=json").status_code == 400


def test_release_batches_its_laplace_draws_with_the_collector_paused(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Laplace draw of a slot release goes through one ``laplace_many`` call (one
    OpenDP vector measurement per scale, docs/math.md §9.4.7), none through ``laplace``,
    and the release runs with the cyclic collector paused (``app.kit.gc_pause``)."""
    import gc

    from app.core.noise.laplace import OpenDPNoise
    from app.releases import service

    ds = make_dataset(client, budget_per_user=10.0, value_bound=10.0)
    load(client, ds, GRIDS)
    batches: list[list[float]] = []
    many = OpenDPNoise.laplace_many

    def spy(self: OpenDPNoise, values: list[float], scales: list[float]) -> list[float]:
        batches.append(list(scales))
        return many(self, values, scales)

    def refuse(self: OpenDPNoise, value: float, scale: float) -> float:
        raise AssertionError("a slot release draws its Laplace noise in one batch")

    monkeypatch.setattr(OpenDPNoise, "laplace_many", spy)
    monkeypatch.setattr(OpenDPNoise, "laplace", refuse)
    collector: list[bool] = []
    release_slot = service.release_slot

    def watched(*args: object, **kwargs: object) -> dict:
        collector.append(gc.isenabled())
        return release_slot(*args, **kwargs)

    monkeypatch.setattr(service, "release_slot", watched)
    req = {"slot_start": HOUR.isoformat(), "epsilon": 0.5, "clip_user": True, "min_users": 1}
    resp = client.post(f"/datasets/{ds}/releases", json=req)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert len(batches) == 1 and len(batches[0]) == 2 * len(out["grids"]) == 6
    reported = [g[s]["noise_scale"] for g in out["grids"] for s in ("mean", "variance")]
    assert sorted(batches[0]) == sorted(reported)
    assert collector == [False] and gc.isenabled()


@pytest.mark.parametrize("statistics", [["mean", "variance"], ["variance"]])
def test_a_new_release_is_sent_as_its_model_would_send_it(
    client: TestClient, statistics: list[str]
) -> None:
    """A new release skips the response model's validation (``spliced_release_json`` in
    ``releases.endpoints``): what is sent must be what validating it would give, field for
    field and value for value."""
    from app.releases.schemas import ReleaseOut

    ds = make_dataset(client, budget_per_user=10.0, value_bound=10.0)
    load(client, ds, GRIDS)
    req = {"slot_start": HOUR.isoformat(), "epsilon": 0.5, "min_users": 1}
    out = client.post(f"/datasets/{ds}/releases", json={**req, "statistics": statistics}).json()
    assert out["cached"] is False and len(out["grids"]) == 3
    validated = ReleaseOut.model_validate(out).model_dump(mode="json", exclude_unset=True)
    assert json.loads(json.dumps(validated)) == out
    assert all(("mean" in g) == ("mean" in statistics) for g in out["grids"])
