"""What ``/map`` draws around a release: the dataset's whole footprint (with boundaries)
and one slot's occupancy, read like the release (public: without a key)."""

from __future__ import annotations

from datetime import timedelta

import h3
from fastapi.testclient import TestClient

from tests.helpers import upload_csv
from tests.integration.grid_fixtures import CELL_A, CELL_B, GRID_A, GRID_B, HOUR, csv_for
from tests.integration.test_public_releases import publish, released


def test_the_footprint_is_every_cell_ever_occupied_with_its_boundary(client: TestClient) -> None:
    ds, rid = released(client)
    later = csv_for({(30.3, -97.72): {"u9": [3.0]}}).replace("T10:", "T13:")
    upload_csv(client, ds, later)  # another hour, another cell: still the footprint
    cells_later = h3.latlng_to_cell(30.3, -97.72, 8)
    body = client.get(f"/releases/{rid}/footprint")
    assert body.status_code == 200, body.text
    got = body.json()
    cells = {h3.latlng_to_cell(lat, lon, 8) for lat, lon in (CELL_A, CELL_B)}
    assert set(got["footprint"]) == cells | {cells_later} and got["public"] is False
    assert got["dataset"]["id"] == ds and got["dataset"]["value_unit"] == "km/h"
    assert got["dataset"]["timezone"] == "UTC" and got["dataset"]["privacy_unit"] == "user"
    for cell in got["footprint"]:
        ring = got["rings"][cell]
        assert ring[0] == ring[-1] and len(ring) == 7
        for (lon, lat), (lat_h3, lon_h3) in zip(ring, h3.cell_to_boundary(cell), strict=False):
            assert abs(lat - lat_h3) < 1e-6 and abs(lon - lon_h3) < 1e-6
    assert set(got) == {"dataset", "public", "footprint", "rings"}


def test_a_slot_s_occupancy_is_the_release_s_slots_only(client: TestClient) -> None:
    _, rid = released(client)
    occ = client.get(f"/releases/{rid}/occupancy", params={"slot_start": HOUR.isoformat()})
    assert occ.status_code == 200, occ.text
    rows = {g["h3_cell"]: g for g in occ.json()["grids"]}
    cell_a = h3.latlng_to_cell(*CELL_A, 8)
    assert rows[cell_a]["n_users"] == len(GRID_A) and set(rows[cell_a]) == {
        "h3_cell", "n_users", "n_records"
    }  # fmt: skip
    assert len(rows) == 2 and sum(r["n_users"] for r in rows.values()) == len(GRID_A) + len(GRID_B)
    other = (HOUR + timedelta(hours=1)).isoformat()
    resp = client.get(f"/releases/{rid}/occupancy", params={"slot_start": other})
    assert resp.status_code == 400 and "not one of this release's slots" in resp.text
    assert client.get(f"/releases/{rid}/occupancy").status_code in (400, 422)


def test_without_a_key_only_a_public_release_s_context_answers(client: TestClient) -> None:
    _, rid = released(client)
    anonymous = TestClient(client.app)
    slot = {"slot_start": HOUR.isoformat()}
    for url, params in ((f"/releases/{rid}/footprint", {}), (f"/releases/{rid}/occupancy", slot)):
        assert anonymous.get(url, params=params).status_code == 401
    publish(client, rid)
    for url, params in ((f"/releases/{rid}/footprint", {}), (f"/releases/{rid}/occupancy", slot)):
        assert anonymous.get(url, params=params).status_code == 200
    assert anonymous.get("/releases/nope/footprint").status_code == 401
