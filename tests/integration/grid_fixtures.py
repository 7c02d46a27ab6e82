"""Small datasets with known occupancy, built through the public HTTP API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import h3
from fastapi.testclient import TestClient

from tests.helpers import auth, create_dataset, create_key, upload_csv

# Two H3 resolution-8 cells in Austin, far enough apart to be different cells.
CELL_A = (30.2672, -97.7431)
CELL_B = (30.4000, -97.7000)
HOUR = datetime(2024, 3, 5, 10, 0, tzinfo=UTC)


def csv_for(grids: dict[tuple[float, float], dict[str, list[float]]]) -> str:
    """CSV text: each user's values a second apart, each location in its own window of the hour

    (a user cannot be in two places at one timestamp: that would be a duplicate)."""
    lines = ["user_id,timestamp,lat,lon,value"]
    assert len(grids) <= 3 and all(len(v) < 1000 for u in grids.values() for v in u.values())
    for k, ((lat, lon), users) in enumerate(grids.items()):
        for user, values in users.items():
            for i, v in enumerate(values):
                ts = (HOUR + timedelta(seconds=1000 * k + i + 1)).isoformat()
                lines.append(f"{user},{ts},{lat},{lon},{v}")
    return "\n".join(lines) + "\n"


def make_dataset(client: TestClient, **overrides: object) -> int:
    """A dataset with U = 10 and a budget of 1.0 per user (the queries' tests); its id."""
    return create_dataset(client, **{"value_bound": 10.0, "budget_per_user": 1.0, **overrides})[
        "id"
    ]


def load(client: TestClient, dataset_id: int, grids: dict) -> dict[tuple[float, float], str]:
    """Upload ``grids`` and return the grid id of each location."""
    assert upload_csv(client, dataset_id, csv_for(grids))["rejected"] == 0
    listed = client.get(f"/datasets/{dataset_id}/grids").json()["grids"]
    by_cell = {g["h3_cell"]: g["grid_id"] for g in listed}
    return {loc: by_cell[h3.latlng_to_cell(loc[0], loc[1], 8)] for loc in grids}


def analyst(client: TestClient, quota: float | None = None) -> dict[str, str]:
    return auth(create_key(client, "analyst", quota))


# Grid A: three users with 1, 2 and 5 records (n = 8, m* = 5, m_* = 1); U = 10.
GRID_A = {"u1": [1.0], "u2": [2.0, 4.0], "u3": [9.0, 9.5, 8.0, 7.0, 6.0]}
GRID_B = {"u3": [5.0, 5.0], "u4": [1.0, 2.0, 3.0]}


def load_two_grids(client: TestClient) -> tuple[int, str, str]:
    """A dataset (``make_dataset``) with GRID_A at CELL_A and GRID_B at CELL_B: its id and
    the two grid ids."""
    ds = make_dataset(client)
    ids = load(client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})
    return ds, ids[CELL_A], ids[CELL_B]
