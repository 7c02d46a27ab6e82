"""``POST /map/cells``: H3 cell boundaries for the map (geometry only)."""

from __future__ import annotations

import h3
from fastapi.testclient import TestClient

CENTRE = h3.latlng_to_cell(30.2672, -97.7431, 8)


def test_boundaries_are_closed_lon_lat_rings(client: TestClient) -> None:
    cells = [CENTRE, h3.cell_to_parent(CENTRE, 5), CENTRE]
    resp = client.post("/map/cells", json={"cells": cells})
    assert resp.status_code == 200, resp.text
    got = resp.json()["cells"]
    assert sorted(got) == sorted(set(cells))
    for cell, ring in got.items():
        assert ring[0] == ring[-1] and len(ring) == 7  # a hexagon, closed
        expected = {(round(lat, 9), round(lon, 9)) for lat, lon in h3.cell_to_boundary(cell)}
        assert {(round(lat, 9), round(lon, 9)) for lon, lat in ring} == expected
    pentagon = h3.get_pentagons(8)[0]
    ring = client.post("/map/cells", json={"cells": [pentagon]}).json()["cells"][pentagon]
    assert len(ring) >= 6


def test_bad_cells_are_refused_with_a_reason(client: TestClient) -> None:
    resp = client.post("/map/cells", json={"cells": [CENTRE, "8f2830828052d25x", "abc"]})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "invalid_request" and "'abc'" in error["message"]
    for body in ({"cells": ["x" * 17]}, {"cells": [CENTRE] * 20_001}, {}, {"cells": [1]}):
        resp = client.post("/map/cells", json=body)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request"
    resp = client.post("/map/cells", params={"format": "wkt"}, json={"cells": [CENTRE]})
    assert resp.status_code == 400


def test_a_key_is_needed(client: TestClient) -> None:
    resp = client.post("/map/cells", json={"cells": [CENTRE]}, headers={"Authorization": ""})
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthenticated"
