"""app/ingest/h3_cells.py: the cells of many points are h3.latlng_to_cell's, one by one."""

from __future__ import annotations

import h3
import h3.api.basic_int as h3i
import numpy as np
import pytest

import app.ingest.h3_cells as h3_cells
from app.ingest.h3_cells import cells


def _points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lat = np.concatenate([rng.uniform(-90, 90, n), [90.0, -90.0, 0.0, -0.0, 30.26, 89.9999999]])
    lon = np.concatenate([rng.uniform(-180, 180, n), [0.0, 180.0, -180.0, -0.0, -97.74, 179.9]])
    return lat, lon


@pytest.mark.parametrize("res", range(16))
def test_cells_are_h3s(res: int) -> None:
    lat, lon = _points(2000, res)
    expected = [
        h3i.latlng_to_cell(a, b, res) for a, b in zip(lat.tolist(), lon.tolist(), strict=True)
    ]
    assert cells(lat, lon, res).tolist() == expected


def test_without_the_c_functions_h3_py_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    lat, lon = _points(500, 99)
    fast = cells(lat, lon, 8)
    monkeypatch.setattr(h3_cells, "_FUNCTIONS", None)
    assert cells(lat, lon, 8).tolist() == fast.tolist()


def test_a_refused_point_raises_as_h3_does() -> None:
    with pytest.raises(h3.H3LatLngDomainError):
        cells(np.array([1.0, float("nan")]), np.array([2.0, 3.0]), 8)
    assert cells(np.empty(0), np.empty(0), 8).size == 0
