"""Coarser grids on demand (issue 15): H3 parents, longer slots aligned to local midnight
(daylight-saving days included), their ids on every grid endpoint, refresh on upload,
race-safe creation; and the grid listing's filters and sort (issue 17)."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import h3
import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.datasets.coarse import GridLevel, coarse_grids
from app.datasets.models import Dataset
from tests.helpers import create_dataset, make_csv, upload_csv

PARENT = h3.latlng_to_cell(30.2672, -97.7431, 7)
CHILDREN = sorted(h3.cell_to_children(PARENT, 8))[:4]
OTHER = h3.latlng_to_cell(30.45, -97.60, 8)  # another res-7 parent
T0 = datetime(2024, 3, 5, 10, 0, tzinfo=UTC)


def _rows(seed: int, start: datetime, hours: int, n_users: int = 12) -> list[tuple]:
    """Each user visits a few cells each hour, a record every 5 minutes."""
    rng = np.random.default_rng(seed)
    rows = []
    cells = [*CHILDREN, OTHER]
    for h in range(hours):
        for u in range(n_users):
            for k in range(int(rng.integers(1, 6))):
                cell = cells[int(rng.integers(0, len(cells)))]
                lat, lon = h3.cell_to_latlng(cell)
                ts = start + timedelta(hours=h, minutes=5 * k, seconds=u)
                rows.append(
                    (f"u{u}", ts.isoformat(), lat, lon, round(float(rng.uniform(0, 20)), 3))
                )
    return rows


def _brute(rows: list[tuple], tz: str, res: int, minutes: int) -> dict[tuple[str, str], dict]:
    """Occupancy of each coarser grid from the raw rows, slots by local wall time."""
    zone = ZoneInfo(tz)
    out: dict[tuple[str, str], dict] = defaultdict(lambda: defaultdict(int))
    for user, ts, lat, lon, _ in rows:
        cell = h3.cell_to_parent(h3.latlng_to_cell(lat, lon, 8), res)
        local = datetime.fromisoformat(ts).astimezone(zone)
        wall = local.hour * 60 + local.minute
        floor = wall - wall % minutes
        start = local.replace(hour=floor // 60, minute=floor % 60, second=0, fold=0)
        start = start.astimezone(UTC).astimezone(zone)  # a wall time in a gap moves forward
        out[(cell, start.isoformat())][user] += 1
    return out


def _listing(client: TestClient, ds: int, **params) -> list[dict]:
    resp = client.get(f"/datasets/{ds}/grids", params={"limit": 10_000, **params})
    assert resp.status_code == 200, resp.text
    return resp.json()["grids"]


def _check(client: TestClient, ds: int, rows: list[tuple], tz: str, res: int, minutes: int):
    want = _brute(rows, tz, res, minutes)
    got = _listing(client, ds, h3_resolution=res, slot_minutes=minutes)
    assert {(g["h3_cell"], g["slot_start"]) for g in got} == set(want)
    for g in got:
        users = want[(g["h3_cell"], g["slot_start"])]
        assert g["n_users"] == len(users)
        assert g["n_records"] == sum(users.values())
        assert g["max_user_records"] == max(users.values())
    return got


@pytest.mark.parametrize(("res", "minutes"), [(7, 60), (8, 120), (7, 180), (6, 1440)])
def test_coarser_listing_matches_brute_force(client: TestClient, res: int, minutes: int) -> None:
    ds = create_dataset(client, value_bound=20.0)["id"]
    rows = _rows(1, T0, 6)
    upload_csv(client, ds, make_csv(rows))
    first = _check(client, ds, rows, "UTC", res, minutes)
    again = _listing(client, ds, h3_resolution=res, slot_minutes=minutes)
    assert [g["grid_id"] for g in again] == [g["grid_id"] for g in first]  # stable ids
    own = _listing(client, ds)
    assert len({g["grid_id"] for g in own} & {g["grid_id"] for g in first}) == 0
    assert all(h3.get_resolution(g["h3_cell"]) == 8 for g in own)  # own listing unchanged
    detail = client.get(f"/datasets/{ds}").json()
    assert detail["n_grids"] == len(own) and detail["n_records"] == len(rows)


def test_a_listed_level_takes_in_new_slots_and_pages_by_offset(client: TestClient) -> None:
    """A coarser level once listed is paged from its stored grids: an upload of new
    slots (and into a listed slot) shows in the next listing, and walking it by
    ``next`` gives the one-page listing."""
    ds = create_dataset(client, value_bound=20.0)["id"]
    rows = _rows(3, T0, 3)
    upload_csv(client, ds, make_csv(rows))
    _check(client, ds, rows, "UTC", 7, 120)
    more = _rows(4, T0 + timedelta(hours=2, seconds=30), 4)  # a listed slot grows, two new
    upload_csv(client, ds, make_csv(more))
    whole = _check(client, ds, rows + more, "UTC", 7, 120)
    walked, offset = [], 0
    while offset is not None:
        page = client.get(
            f"/datasets/{ds}/grids",
            params={"h3_resolution": 7, "slot_minutes": 120, "limit": 2, "offset": offset},
        ).json()
        walked += page["grids"]
        offset = page["next"]
    assert [g["grid_id"] for g in walked] == [g["grid_id"] for g in whole]


@pytest.mark.parametrize(
    ("day", "hours"),
    [(datetime(2024, 11, 3, 4, 0, tzinfo=UTC), 8), (datetime(2024, 3, 10, 5, 0, tzinfo=UTC), 8)],
    ids=["fall-back", "spring-forward"],
)
def test_longer_slots_follow_local_midnight_across_dst(
    client: TestClient, day: datetime, hours: int
) -> None:
    tz = "America/Chicago"
    ds = create_dataset(client, value_bound=20.0, timezone=tz)["id"]
    rows = _rows(2, day, hours)
    upload_csv(client, ds, make_csv(rows))
    got = _check(client, ds, rows, tz, 8, 120)
    starts = sorted({g["slot_start"] for g in got})
    walls = [datetime.fromisoformat(s).astimezone(ZoneInfo(tz)) for s in starts]
    assert all(w.minute == 0 for w in walls)
    if day.month == 11:  # 00:00 CDT to 02:00 CST is three real hours, one slot
        assert "2024-11-03T00:00:00-05:00" in starts and "2024-11-03T02:00:00-06:00" in starts
        assert "2024-11-03T01:00:00-06:00" not in starts
    else:  # the 02:00-04:00 slot starts at 03:00 CDT and lasts one real hour
        assert "2024-03-10T03:00:00-05:00" in starts and "2024-03-10T00:00:00-06:00" in starts


def test_coarser_grid_ids_work_on_every_grid_endpoint(client: TestClient) -> None:
    ds = create_dataset(client, value_bound=20.0, budget_per_user=10.0)["id"]
    rows = _rows(3, T0, 2)
    upload_csv(client, ds, make_csv(rows))
    coarse = _listing(client, ds, h3_resolution=7, sort="-n_users")[0]
    assert coarse["h3_cell"] == PARENT
    params = {"epsilon": 0.5, "mechanism": "clip"}
    mean = client.get(f"/grids/{coarse['grid_id']}/mean", params=params)
    assert mean.status_code == 200, mean.text
    assert mean.json()["n_users"] == coarse["n_users"]
    var = client.get(f"/grids/{coarse['grid_id']}/variance", params=params)
    assert var.status_code == 200
    quote = client.get(
        f"/grids/{coarse['grid_id']}/quote", params={"statistic": "mean", "target_error": 5}
    )
    assert quote.status_code == 200, quote.text
    ledger = client.get(f"/datasets/{ds}/ledger").json()["users"]
    assert len(ledger) == coarse["n_users"]  # each user of the coarser grid charged once
    assert all(u["spent"] == pytest.approx(1.0) for u in ledger)
    assert client.get(f"/grids/{coarse['grid_id']}/mean", params=params).json()["cached"]

    # an upload into the coarser grid's area changes it: new counts, a fresh answer
    more = [("late", (T0 + timedelta(minutes=7)).isoformat(), *h3.cell_to_latlng(CHILDREN[0]), 3.0)]
    upload_csv(client, ds, make_csv(more))
    after = client.get(f"/grids/{coarse['grid_id']}/mean", params=params).json()
    assert after["cached"] is False and after["n_users"] == coarse["n_users"] + 1
    relisted = {g["grid_id"]: g for g in _listing(client, ds, h3_resolution=7)}
    assert relisted[coarse["grid_id"]]["n_records"] == coarse["n_records"] + 1


def test_concurrent_creation_makes_one_grid_each(client: TestClient, app) -> None:
    ds = create_dataset(client, value_bound=20.0)["id"]
    upload_csv(client, ds, make_csv(_rows(4, T0, 4)))
    results: list[list[tuple[str, str]]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def build() -> None:
        try:
            barrier.wait()
            with app.state.sessionmaker() as session:
                dataset = session.get(Dataset, ds)
                grids = coarse_grids(session, dataset, GridLevel(7, 120))
                results.append([(g.public_id, g.h3_cell) for g in grids])
                session.commit()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    listed = [
        (g["grid_id"], g["h3_cell"])
        for g in _listing(client, ds, h3_resolution=7, slot_minutes=120)
    ]
    assert all(r == listed for r in results) and listed


def test_listing_filters_sorts_and_refuses_bad_input(client: TestClient) -> None:
    ds = create_dataset(client, value_bound=20.0)["id"]
    upload_csv(client, ds, make_csv(_rows(5, T0, 3)))
    every = _listing(client, ds)
    busy = _listing(client, ds, min_users=5)
    assert busy == [g for g in every if g["n_users"] >= 5]
    by_users = _listing(client, ds, sort="-n_users")
    assert [g["n_users"] for g in by_users] == sorted((g["n_users"] for g in every), reverse=True)
    assert [g["n_users"] for g in _listing(client, ds, sort="n_users")] == sorted(
        g["n_users"] for g in every
    )
    late = _listing(client, ds, sort="-slot_start")
    assert [g["slot_start"] for g in late] == sorted((g["slot_start"] for g in every), reverse=True)
    one = _listing(client, ds, h3_cell=CHILDREN[0].upper())
    assert one and all(g["h3_cell"] == CHILDREN[0] for g in one)
    coarse = _listing(client, ds, h3_resolution=7, min_users=3, sort="-n_users")
    assert all(g["n_users"] >= 3 for g in coarse)
    assert [g["n_users"] for g in coarse] == sorted((g["n_users"] for g in coarse), reverse=True)
    page = client.get(
        f"/datasets/{ds}/grids", params={"h3_resolution": 7, "limit": 1, "offset": 0}
    ).json()
    assert len(page["grids"]) == 1 and page["next"] == 1
    for bad in (
        {"h3_cell": "zzz"},
        {"h3_cell": PARENT},  # a valid cell of another resolution
        {"sort": "users"},
        {"bogus": "1"},
        {"h3_resolution": 9},
        {"slot_minutes": 90},
        {"slot_minutes": 30},
        {"min_users": -1},
    ):
        resp = client.get(f"/datasets/{ds}/grids", params=bad)
        assert resp.status_code in (400, 422), (bad, resp.text)
        assert resp.json()["error"]["code"] == "invalid_request"
