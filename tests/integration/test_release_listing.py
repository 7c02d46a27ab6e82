"""``GET /datasets/{id}/releases``: a dataset's stored releases, newest first, by pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from app.releases.models import SlotRelease
from tests.helpers import create_dataset, upload_csv
from tests.integration.grid_fixtures import CELL_A, CELL_B, analyst

DAY = datetime(2024, 3, 5, tzinfo=UTC)
HOURS = [DAY + timedelta(hours=h) for h in (7, 8, 9)]


def _csv() -> str:
    """Three users in two cells in each of three hours."""
    lines = ["user_id,timestamp,lat,lon,value"]
    for hour in HOURS:
        for k, (lat, lon) in enumerate((CELL_A, CELL_B)):
            for user in range(3):
                ts = hour + timedelta(minutes=10 * k, seconds=user + 1)
                lines.append(f"u{user},{ts.isoformat()},{lat},{lon},{2.0 + user}")
    return "\n".join(lines) + "\n"


def _release(client: TestClient, ds: int, hour: datetime, eps: float, headers: dict) -> str:
    body = {"slot_start": hour.isoformat(), "epsilon": eps, "min_users": 1}
    resp = client.post(f"/datasets/{ds}/releases", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()["release_id"]


@pytest.fixture
def released(client: TestClient) -> tuple[int, list[str], dict]:
    return _four_releases(client)


@pytest.fixture(scope="module")
def read_only(shared_client: TestClient) -> tuple[TestClient, int, list[str], dict]:
    """``released`` on a client shared by the tests below that only read the listing."""
    return (shared_client, *_four_releases(shared_client))


def _four_releases(client: TestClient) -> tuple[int, list[str], dict]:
    """A dataset (Europe/Berlin) with four releases, made in this order."""
    ds = create_dataset(client, value_bound=10.0, budget_per_user=100.0, timezone="Europe/Berlin")[
        "id"
    ]
    assert upload_csv(client, ds, _csv())["rejected"] == 0
    headers = analyst(client)
    made = [
        _release(client, ds, HOURS[1], 0.5, headers),
        _release(client, ds, HOURS[0], 0.5, headers),
        _release(client, ds, HOURS[2], 0.25, headers),
        _release(client, ds, HOURS[1], 0.75, headers),
    ]
    return ds, made, headers


def test_lists_what_each_release_was_newest_first(read_only) -> None:
    client, ds, made, headers = read_only
    resp = client.get(f"/datasets/{ds}/releases", headers=headers)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["next"] is None
    rows = body["releases"]
    assert [r["release_id"] for r in rows] == made[::-1]
    for row in rows:
        stored = client.get(f"/releases/{row['release_id']}", headers=headers).json()
        assert row["slot_start"] == stored["slot_start"]
        assert row["epsilon"] == stored["epsilon"]
        assert row["max_user_cost"] == stored["max_user_cost"]
        assert row["n_grids"] == len(stored["grids"]) == 2
        assert (row["slots"], row["partition"]) == (1, "fixed")
        assert (row["h3_resolution"], row["slot_minutes"]) == (8, 60)
        assert row["created_at"].endswith("+01:00")  # local, like every time of the API
    assert rows[0]["slot_start"] == "2024-03-05T09:00:00+01:00"
    assert [r["epsilon"] for r in rows] == [0.75, 0.25, 0.5, 0.5]


def test_pages_follow_next_without_gaps(read_only) -> None:
    client, ds, made, headers = read_only
    seen, offset, pages = [], 0, 0
    while offset is not None:
        resp = client.get(
            f"/datasets/{ds}/releases", params={"limit": 3, "offset": offset}, headers=headers
        )
        assert resp.status_code == 200, resp.text
        page = resp.json()
        assert len(page["releases"]) <= 3
        seen += [r["release_id"] for r in page["releases"]]
        offset, pages = page["next"], pages + 1
    assert (seen, pages) == (made[::-1], 2)
    exact = client.get(f"/datasets/{ds}/releases", params={"limit": 4}, headers=headers).json()
    assert exact["next"] is None and len(exact["releases"]) == 4
    past = client.get(f"/datasets/{ds}/releases", params={"offset": 9}, headers=headers).json()
    assert past == {"releases": [], "next": None}


def test_newest_is_by_creation_time(client: TestClient, app, released) -> None:
    ds, made, headers = released
    with app.state.sessionmaker() as s, s.begin():  # the first release made last
        s.execute(
            update(SlotRelease)
            .where(SlotRelease.public_id == made[0])
            .values(created_at=datetime.now(UTC) + timedelta(hours=1))
        )
    rows = client.get(f"/datasets/{ds}/releases", headers=headers).json()["releases"]
    assert [r["release_id"] for r in rows] == [made[0], *made[:0:-1]]


def test_older_releases_without_new_fields_read_as_one_fixed_slot(
    client: TestClient, app, released
) -> None:
    ds, made, headers = released
    with app.state.sessionmaker() as s, s.begin():
        row = s.scalars(select(SlotRelease).where(SlotRelease.public_id == made[0])).one()
        row.head = {**row.head, "slots": 3, "partition": "adaptive"}
        old = s.scalars(select(SlotRelease).where(SlotRelease.public_id == made[1])).one()
        old.head = {k: v for k, v in old.head.items() if k not in ("slots", "partition")}
    rows = client.get(f"/datasets/{ds}/releases", headers=headers).json()["releases"]
    by_id = {r["release_id"]: r for r in rows}
    assert (by_id[made[0]]["slots"], by_id[made[0]]["partition"]) == (3, "adaptive")
    assert (by_id[made[1]]["slots"], by_id[made[1]]["partition"]) == (1, "fixed")


def test_only_this_datasets_releases(client: TestClient, released) -> None:
    ds, _, headers = released
    other = create_dataset(client, value_bound=10.0, budget_per_user=100.0)["id"]
    resp = client.get(f"/datasets/{other}/releases", headers=headers)
    assert resp.json() == {"releases": [], "next": None}
    assert len(client.get(f"/datasets/{ds}/releases").json()["releases"]) == 4


def test_roles_and_unknown_datasets(read_only) -> None:
    client, ds, _, _ = read_only
    assert client.get(f"/datasets/{ds}/releases").status_code == 200  # the admin key
    resp = client.get(f"/datasets/{ds}/releases", headers={"Authorization": "Bearer nope"})
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthenticated"
    assert client.get(f"/datasets/{ds}/releases", headers={"Authorization": ""}).status_code == 401
    for missing in (ds + 1000, "07", "x"):
        resp = client.get(f"/datasets/{missing}/releases")
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


BAD_PAGING = [
    ({"offset": -1}, 400),  # a bad value: 400, as every invalid_request
    ({"offset": "a"}, 400),
    ({"offset": 2**31}, 400),
    ({"limit": 0}, 400),
    ({"limit": 1001}, 400),
    ({"limit": "1.5"}, 400),
    ({"page": 2}, 400),  # an unknown parameter: 400, as everywhere
    ({"limit": 5, "sort": "slot_start"}, 400),
]


def test_bad_paging_is_refused(read_only) -> None:
    client, ds, _, headers = read_only
    for params, status in BAD_PAGING:
        resp = client.get(f"/datasets/{ds}/releases", params=params, headers=headers)
        assert resp.status_code == status, (params, resp.text)
        error = resp.json()["error"]
        assert error["code"] == "invalid_request" and error["message"], params
