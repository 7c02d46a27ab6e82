"""An adaptive release whose partition is chosen with its per-cell allocation (docs/math.md
§6.10) through the service: the preview states the release's useful share, the released
cells are disjoint with ``min_users`` units each, the dense fine cells are released finely
and usefully, and the ledger charges no unit more than ``max_user_cost``."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import h3
from fastapi.testclient import TestClient

from tests.helpers import upload_csv
from tests.integration.grid_fixtures import CELL_A, HOUR, make_dataset
from tests.integration.test_release_per_cell import BODY as PER_CELL_BODY
from tests.integration.test_release_per_cell import released_as_previewed
from tests.integration.test_release_plans import _spent

U = 10.0
PARENT = h3.cell_to_parent(h3.latlng_to_cell(*CELL_A, 8), 7)
CHILDREN = sorted(h3.cell_to_children(PARENT, 8))
DENSE, SPARSE = CHILDREN[:3], CHILDREN[3:5]
BODY = {**PER_CELL_BODY, "partition": "adaptive", "coarsest_resolution": 7}


def _csv() -> str:
    """25 units in each dense child, 3 in each sparse one, a few crossing two sparse
    children; every unit's values a second apart."""
    lines = ["user_id,timestamp,lat,lon,value"]
    members = {c: [f"{c[-6:]}-{i}" for i in range(25)] for c in DENSE}
    members.update({c: [f"{c[-6:]}-{i}" for i in range(3)] for c in SPARSE})
    members[SPARSE[1]] += [f"{SPARSE[0][-6:]}-{i}" for i in range(2)]  # crossing units
    for k, (cell, users) in enumerate(members.items()):
        lat, lon = h3.cell_to_latlng(cell)
        for j, user in enumerate(users):
            for r in range(3):
                ts = (HOUR + timedelta(seconds=300 * k + 3 * j + r + 1)).isoformat()
                lines.append(f"{user},{ts},{lat},{lon},{(j * 7 + r) % 10 + 0.5}")
    return "\n".join(lines) + "\n"


def test_the_refined_partition_is_released_as_previewed(client: TestClient, app) -> None:
    ds = make_dataset(client, budget_per_user=10.0, value_bound=U)
    assert upload_csv(client, ds, _csv())["rejected"] == 0
    body = released_as_previewed(client, ds, BODY)
    cells = [g["h3_cell"] for g in body["grids"]]
    assert not any(
        a != b and h3.get_resolution(a) < h3.get_resolution(b)
        and h3.cell_to_parent(b, h3.get_resolution(a)) == a
        for a in cells for b in cells
    )  # fmt: skip
    assert all(g["n_users"] >= BODY["min_users"] for g in body["grids"])
    fine = {g["h3_cell"]: g for g in body["grids"] if g["h3_cell"] in DENSE}
    assert set(fine) == set(DENSE)  # the dense children are released at res 8, usefully
    for g in fine.values():
        lo, hi = g["user_mean"]["ci95"]
        assert hi - lo <= U / 5
    spent = _spent(app)
    cost = Decimal(str(body["max_user_cost"]))
    assert max(spent.values()) == cost <= Decimal("2")
