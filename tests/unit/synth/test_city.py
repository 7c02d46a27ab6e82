"""The synthetic city records generator: columns, cells, hours, reproducibility."""

from __future__ import annotations

import csv
import io
from collections import Counter

import h3
import numpy as np
import pytest

from app.synth.city import CityConfig, records_csv, synthetic_city, synthetic_days
from app.time.slots import parse_timestamp

SMALL = CityConfig(n_buses=40, n_hours=3)


@pytest.fixture(scope="module")
def city():
    return synthetic_city(np.random.default_rng(1), SMALL)


def test_columns_and_ranges(city, tmp_path):
    text = records_csv(city, tmp_path / "city.csv")
    assert (tmp_path / "city.csv").read_text(encoding="utf-8") == text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["user_id", "timestamp", "lat", "lon", "value"]
    assert len(rows) == len(city) > 500
    values = np.array([float(r["value"]) for r in rows])
    assert values.min() >= 0.0 and values.max() <= 65.0
    # Every position lies in one of the city's 7 cells at resolution 8.
    cells = {h3.latlng_to_cell(float(r["lat"]), float(r["lon"]), 8) for r in rows}
    assert cells <= set(city.cells) and len(city.cells) == 7
    # Timestamps carry the zone's offset, span the configured hours, and a bus never
    # sends two readings with the same timestamp (the service would drop duplicates).
    stamps = [parse_timestamp(r["timestamp"]) for r in rows]
    assert all(aware for _, aware in stamps)
    assert rows[0]["timestamp"].endswith("+05:30")
    hours = {r["timestamp"][:13] for r in rows}
    assert len(hours) == 3
    assert len({(r["user_id"], r["timestamp"]) for r in rows}) == len(rows)


def test_grids_have_many_users_with_heavy_tailed_counts(city):
    cells = [h3.latlng_to_cell(a, b, 8) for a, b in zip(city.lat, city.lon, strict=True)]
    hour = [t[:13] for t in city.timestamp]
    per_pair = Counter(zip(cells, hour, city.user_id.tolist(), strict=True))
    per_grid = Counter((c, h) for c, h, _ in per_pair)
    assert max(per_grid.values()) >= 8  # users per grid
    counts = sorted(per_pair.values())
    assert counts[0] >= 1 and counts[-1] >= 10 * np.median(counts) / 2


def test_reproducible_and_seed_dependent():
    a = synthetic_city(np.random.default_rng(7), CityConfig(n_buses=10, n_hours=2))
    b = synthetic_city(np.random.default_rng(7), CityConfig(n_buses=10, n_hours=2))
    c = synthetic_city(np.random.default_rng(8), CityConfig(n_buses=10, n_hours=2))
    assert records_csv(a) == records_csv(b)
    assert records_csv(a) != records_csv(c)


def test_config_validation():
    with pytest.raises(ValueError, match="n_buses"):
        CityConfig(n_buses=0)
    with pytest.raises(ValueError, match="p_active"):
        CityConfig(p_active=0.0)


def test_a_month_of_days_keeps_its_local_hours_across_daylight_saving() -> None:
    config = CityConfig(
        n_buses=15, n_hours=2, start="2024-03-01T08:00:00", timezone="America/Chicago"
    )
    month = synthetic_days(np.random.default_rng(3), config, n_days=31)
    local = {t[:10]: set() for t in month.timestamp}
    for t in month.timestamp:
        local[t[:10]].add(t[11:13])
    assert len(local) == 31  # every day of March, the 10th (23 hours) too
    assert all(hours <= {"08", "09"} for hours in local.values())
    assert {t[-6:] for t in month.timestamp} == {"-06:00", "-05:00"}  # CST, then CDT
    again = synthetic_days(np.random.default_rng(3), config, n_days=31)
    assert again.timestamp == month.timestamp and np.array_equal(again.value, month.value)
