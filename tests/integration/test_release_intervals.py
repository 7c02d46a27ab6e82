"""A release's intervals: the preview says each grid's ci95 width from public counts, and
``objective: interval`` publishes the narrowest honest ones (docs/math.md §5.12, §11.6)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, load, make_dataset

U = 10.0
GRIDS = {
    CELL_A: {f"u{i}": [float(i % 7)] * (1 + i % 4) for i in range(40)},
    CELL_B: {f"v{i}": [float(i % 5) + 1.5] * (1 + i % 3) for i in range(30)},
}


@pytest.mark.parametrize("objective", ["accuracy", "interval"])
def test_preview_widths_bound_the_published_ones(client: TestClient, objective: str) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=U)
    load(client, ds, GRIDS)
    req = {"slot_start": HOUR.isoformat(), "epsilon": 1.0, "min_users": 5, "objective": objective}
    preview = client.post(f"/datasets/{ds}/releases/preview", json=req)
    assert preview.status_code == 200, preview.text
    widths = {g["grid_id"]: g for g in preview.json()["grids"]}
    assert len(widths) == 2
    for g in widths.values():
        assert set(g["expected_ci95_widths"]) == {"mean", "variance"}
        assert g["expected_ci95_width"] == g["expected_ci95_widths"]["mean"]
        assert 0 < g["expected_ci95_widths"]["mean"] <= U
        assert 0 < g["expected_ci95_widths"]["variance"] <= U * U / 4
    out = client.post(f"/datasets/{ds}/releases", json=req)
    assert out.status_code == 200, out.text
    body = out.json()
    assert body["objective"] == objective
    for grid in body["grids"]:
        for stat, top in (("mean", U), ("variance", U * U / 4)):
            lo, hi = grid[stat]["ci95"]
            assert 0 <= lo <= grid[stat]["estimate"] <= hi <= top
            assert hi - lo <= widths[grid["grid_id"]]["expected_ci95_widths"][stat] * (1 + 1e-9)
        if objective == "interval":
            assert grid["mean"]["mechanism"] == "capped_weights"
            assert grid["variance"]["mechanism"] == "clip"


def test_objective_needs_auto(client: TestClient) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=U)
    load(client, ds, GRIDS)
    req = {
        "slot_start": HOUR.isoformat(),
        "epsilon": 1.0,
        "min_users": 5,
        "mechanism": "baseline",
        "objective": "interval",
    }
    bad = client.post(f"/datasets/{ds}/releases", json=req)
    assert bad.status_code == 400 and "auto" in bad.json()["error"]["message"]
    worse = client.post(f"/datasets/{ds}/releases", json={**req, "objective": "narrow"})
    assert worse.status_code in (400, 422) and worse.json()["error"]["code"] == "invalid_request"
