"""Per-cell epsilon through the service (docs/math.md §6.10): two cells that an equal
epsilon cannot make useful together are both useful, each grid states its own epsilon,
and the ledger charges every unit the sum of its cells' epsilons, never above
``max_user_cost``."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

from fastapi.testclient import TestClient

from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, load, make_dataset
from tests.integration.test_release_plans import _spent

U = 10.0
SHARED = {f"s{i}": [float(i % 9) + 0.5] for i in range(10)}
GRIDS = {
    CELL_A: {**{f"a{i}": [float(i % 7) + 1.0] for i in range(30)}, **SHARED},
    CELL_B: {**{f"b{i}": [float(i % 5) + 2.0] for i in range(15)}, **SHARED},
}
BODY = {
    "slot_start": HOUR.isoformat(),
    "max_user_cost": 2.0,
    "min_users": 5,
    "statistics": ["user_mean"],
    "objective": "interval",
}


def released_as_previewed(client: TestClient, ds: int, request: dict) -> dict:
    """The release of ``request``, after checking its preview stated the same ``useful``."""
    preview = client.post(f"/datasets/{ds}/releases/preview", json=request)
    assert preview.status_code == 200, preview.text
    out = client.post(f"/datasets/{ds}/releases", json=request)
    assert out.status_code == 200, out.text
    body: dict = out.json()
    assert body["useful"] == preview.json()["useful"]
    return body


def test_cells_get_their_own_epsilon_and_units_pay_the_sum(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=U)
    load(client, ds, GRIDS)
    body = released_as_previewed(client, ds, BODY)
    assert body["useful"]["cells"] == 2 and body["useful"]["records"] == 1.0
    eps = {g["n_users"]: Decimal(str(g["user_mean"]["epsilon"])) for g in body["grids"]}
    assert set(eps) == {40, 25} and eps[40] != eps[25]
    for g in body["grids"]:
        lo, hi = g["user_mean"]["ci95"]
        assert hi - lo <= U / 5
    # the release's epsilon is the quantum and K the most quanta a unit pays
    cost = Decimal(str(body["max_user_cost"]))
    assert Decimal(str(body["epsilon"])) * body["K"] == cost <= Decimal("2")
    spent = _spent(app)
    assert len(spent) == 55
    assert sorted(set(spent.values())) == sorted({eps[40], eps[25], eps[40] + eps[25]})
    assert max(spent.values()) == eps[40] + eps[25] == cost
    assert Counter(spent.values())[eps[40] + eps[25]] == 10  # the shared units


def test_an_equal_epsilon_is_kept_when_the_variance_is_asked(client: TestClient) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=U)
    load(client, ds, GRIDS)
    body = {**BODY, "statistics": ["user_mean", "variance"]}
    out = client.post(f"/datasets/{ds}/releases", json=body)
    assert out.status_code == 200, out.text
    got = {g["user_mean"]["epsilon"] for g in out.json()["grids"]}
    assert len(got) == 1
