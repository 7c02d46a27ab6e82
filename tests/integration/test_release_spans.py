"""Multi-slot releases and adaptive partitions through HTTP (API.md: ``slots``,
``partition``, ``coarsest_resolution``, ``coverage``), checked against independent
counts of the uploaded rows and against the ledger."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import h3
import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.ledger.models import LedgerEntry
from tests.helpers import make_csv, upload_csv
from tests.integration.grid_fixtures import make_dataset

START = datetime(2024, 3, 5, 6, 0, tzinfo=UTC)
DOWNTOWN = (30.2672, -97.7431)
HOURS = 3


def _rows(seed: int = 3) -> list[tuple[str, datetime, float, float, float]]:
    """Buses over ``HOURS`` hours: 80 that stay downtown (a few res-8 cells, dense), 30
    that roam the outskirts (many res-8 cells, few buses each). Values are irrelevant."""
    rng = np.random.default_rng(seed)  # test data, not the release path
    rows = []
    for hour in range(HOURS):
        t0 = START + timedelta(hours=hour)
        for bus in range(110):
            if bus < 80:
                lat, lon = DOWNTOWN[0] + rng.normal(0, 0.001), DOWNTOWN[1] + rng.normal(0, 0.001)
                spread = 0.0005
            else:
                lat = DOWNTOWN[0] + rng.uniform(-0.06, 0.06)
                lon = DOWNTOWN[1] + rng.uniform(-0.06, 0.06)
                spread = 0.03
            for i in range(int(rng.integers(3, 12))):
                when = t0 + timedelta(seconds=30 * i + 1)
                rows.append(
                    (
                        f"bus{bus}",
                        when,
                        lat + rng.normal(0, spread),
                        lon + rng.normal(0, spread),
                        float(rng.uniform(0, 10)),
                    )
                )
    return rows


def _city(client: TestClient) -> tuple[int, list]:
    ds = make_dataset(client, budget_per_user=100.0)
    rows = _rows()
    csv = make_csv([(u, t.isoformat(), lat, lon, v) for u, t, lat, lon, v in rows])
    assert upload_csv(client, ds, csv)["rejected"] == 0
    return ds, rows


@pytest.fixture
def city(client: TestClient) -> tuple[int, list]:
    return _city(client)


@pytest.fixture(scope="module")
def shared_city(shared_client: TestClient) -> tuple[int, list]:
    """``city`` for the refused releases, which share it: none may store a release."""
    return _city(shared_client)


def _charges(app, dataset_id: int) -> Counter:
    with app.state.sessionmaker() as s:
        entries = s.scalars(
            select(LedgerEntry).where(
                LedgerEntry.dataset_id == dataset_id, LedgerEntry.kind == "release"
            )
        ).all()
    spent: Counter = Counter()
    for e in entries:
        for u in e.users:
            spent[u] += e.epsilon
    return spent


def _slot_of(when: datetime) -> datetime:
    return when.replace(minute=0, second=0, microsecond=0)


def test_a_span_of_slots_is_planned_jointly_under_the_cost_cap(
    client: TestClient, app, city
) -> None:
    ds, rows = city
    body = {
        "slot_start": START.isoformat(),
        "slots": HOURS,
        "max_user_cost": 2.0,
        "min_users": 3,
        "statistics": ["mean"],
    }
    resp = client.post(f"/datasets/{ds}/releases", json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["slots"] == HOURS and out["partition"] == "fixed"
    starts = {datetime.fromisoformat(g["slot_start"]) for g in out["grids"]}
    assert starts == {START + timedelta(hours=h) for h in range(HOURS)}
    spent = _charges(app, ds)
    assert spent and max(spent.values()) <= Decimal("2.0")
    assert out["K"] * Decimal(str(out["epsilon"])) <= Decimal("2.0") + Decimal("1e-12")
    # coverage: records of grids with >= 3 users, by an independent count
    users_in: dict[tuple[str, datetime], set[str]] = defaultdict(set)
    for u, t, lat, lon, _ in rows:
        users_in[(h3.latlng_to_cell(lat, lon, 8), _slot_of(t))].add(u)
    kept = sum(
        1
        for u, t, lat, lon, _ in rows
        if len(users_in[(h3.latlng_to_cell(lat, lon, 8), _slot_of(t))]) >= 3
    )
    assert out["coverage"]["records"] == pytest.approx(kept / len(rows))
    # stored, listed and exported as a span
    again = client.post(f"/datasets/{ds}/releases", json=body).json()
    assert again["cached"] is True and again["release_id"] == out["release_id"]
    assert _charges(app, ds) == spent
    listed = client.get(f"/datasets/{ds}/releases").json()["releases"][0]
    assert (listed["slots"], listed["n_grids"]) == (HOURS, len(out["grids"]))
    geo = client.get(f"/releases/{out['release_id']}", params={"format": "geojson"}).json()
    assert len(geo["features"]) == len(out["grids"])
    assert {f["properties"]["slot_start"] for f in geo["features"]} == {
        g["slot_start"] for g in out["grids"]
    }


def test_an_adaptive_partition_is_disjoint_and_every_cell_has_min_users(
    client: TestClient, app, city
) -> None:
    ds, rows = city
    body = {
        "slot_start": START.isoformat(),
        "slots": HOURS,
        "epsilon": 1.0,
        "min_users": 8,
        "partition": "adaptive",
        "coarsest_resolution": 5,
        "statistics": ["mean"],
    }
    resp = client.post(f"/datasets/{ds}/releases", json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["partition"] == "adaptive" and out["grids"]
    released = {(g["h3_cell"], datetime.fromisoformat(g["slot_start"])) for g in out["grids"]}
    for g in out["grids"]:
        assert 5 <= g["h3_resolution"] == h3.get_resolution(g["h3_cell"]) <= 8
        assert g["mean"]["mechanism"] == "capped_weights"  # adaptive: objective interval
    # every row lies in at most one released cell (disjoint), counted independently
    users: dict[tuple[str, datetime], set[str]] = defaultdict(set)
    covered = 0
    for u, t, lat, lon, _ in rows:
        fine = h3.latlng_to_cell(lat, lon, 8)
        homes = [
            (h3.cell_to_parent(fine, r), _slot_of(t))
            for r in range(5, 9)
            if (h3.cell_to_parent(fine, r), _slot_of(t)) in released
        ]
        assert len(homes) <= 1, "released cells overlap"
        if homes:
            users[homes[0]].add(u)
            covered += 1
    assert set(users) == released
    assert all(len(users[c]) >= 8 for c in released)
    assert {(g["h3_cell"], g["n_users"]) for g in out["grids"]} == {
        (c, len(users[(c, s)])) for c, s in released
    }
    assert out["coverage"]["records"] == pytest.approx(covered / len(rows))
    assert out["coverage"]["records"] > 0.9  # the outskirts are released coarser
    assert any(g["h3_resolution"] >= 7 for g in out["grids"])  # downtown stays fine
    assert any(g["h3_resolution"] <= 6 for g in out["grids"])


def test_adaptive_with_a_cost_cap_charges_nobody_more(client: TestClient, app, city) -> None:
    ds, _ = city
    body = {
        "slot_start": START.isoformat(),
        "slots": HOURS,
        "max_user_cost": 2.0,
        "min_users": 8,
        "partition": "adaptive",
    }
    preview = client.post(f"/datasets/{ds}/releases/preview", json=body)
    assert preview.status_code == 200, preview.text
    resp = client.post(f"/datasets/{ds}/releases", json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["coarsest_resolution"] is None and out["coverage"] == preview.json()["coverage"]
    assert [g["h3_cell"] for g in out["grids"]] == [g["h3_cell"] for g in preview.json()["grids"]]
    spent = _charges(app, ds)
    assert spent and max(spent.values()) <= Decimal("2.0")


@pytest.mark.parametrize(
    ("extra", "status", "words"),
    [
        ({"coarsest_resolution": 5}, 400, "adaptive"),
        ({"partition": "adaptive", "coarsest_resolution": 9}, 400, "finer"),
        ({"partition": "tiled"}, 400, "partition"),
        ({"slots": 24 * 8}, 400, "7 days"),
        ({"slots": 0}, 400, "slots"),
        ({"slot_start": "2030-01-01T00:00:00+00:00", "slots": 5}, 404, "5 slots"),
    ],
)
def test_span_and_partition_errors(
    shared_client: TestClient, shared_city, extra: dict, status: int, words: str
) -> None:
    ds, _ = shared_city
    body = {"slot_start": START.isoformat(), "epsilon": 1.0, **extra}
    resp = shared_client.post(f"/datasets/{ds}/releases", json=body)
    assert resp.status_code == status, resp.text
    assert words in resp.json()["error"]["message"]
    assert shared_client.get(f"/datasets/{ds}/releases").json()["releases"] == []
