"""Typical-day profile releases through HTTP (API.md: ``profile``): one time of day pooled
over chosen local dates, privacy units per budget window, charged in their own window,
DST dates and dates without data, refusals that charge nobody, replays charged once."""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.ledger.models import BudgetAccount, LedgerEntry
from tests.helpers import make_csv, upload_csv
from tests.integration.grid_fixtures import CELL_A, make_dataset

ZONE = ZoneInfo("America/Chicago")
N_BUSES = 12
#: Sat 12 .. Thu 17 March 2016 (the 13th is 23 hours long); no data on Wednesday the 16th.
DATA_DATES = [date(2016, 3, d) for d in (12, 13, 14, 15, 17)]
WEEKDAYS_WITH_DATA = [d for d in DATA_DATES if d.isoweekday() <= 5]


def _rows(day: date, hour: int, buses: int = N_BUSES, minute: int = 5) -> list[tuple]:
    """Three records per bus in the local hour ``hour`` of ``day`` (fold 0)."""
    rows = []
    start = datetime(day.year, day.month, day.day, hour, minute, tzinfo=ZONE)
    for u in range(buses):
        for i in range(3):
            when = start + timedelta(minutes=10 * i + u % 5)
            rows.append((f"bus{u}", when.isoformat(), *CELL_A, float((u + i + day.day) % 10)))
    return rows


def _dataset(client: TestClient, window: str = "day", budget: float = 1.0) -> int:
    ds = make_dataset(
        client, timezone="America/Chicago", budget_window=window, budget_per_user=budget
    )
    rows = [r for d in DATA_DATES for h in (8, 9) for r in _rows(d, h)]
    assert upload_csv(client, ds, make_csv(rows))["rejected"] == 0
    return ds


def _accounts(app, ds: int) -> dict[tuple[date, int], Decimal]:
    """(window, user) -> spend, checked against the ledger's entries."""
    with app.state.sessionmaker() as s:
        rows = s.execute(
            select(BudgetAccount.window_start, BudgetAccount.user_id, BudgetAccount.spent).where(
                BudgetAccount.dataset_id == ds
            )
        ).all()
        entries = s.scalars(select(LedgerEntry).where(LedgerEntry.dataset_id == ds)).all()
    from_entries: Counter = Counter()
    for e in entries:
        for u in e.users:
            from_entries[(e.window_start, u)] += e.epsilon
    accounts = {(w, u): v for w, u, v in rows if v}
    assert accounts == dict(from_entries), "ledger != accounts"
    return accounts


def _body(**extra: object) -> dict:
    return {
        "slot_start": "08:00",
        "max_user_cost": 0.8,
        "statistics": ["mean"],
        "min_users": 5,
        "profile": {"from": "2016-03-12", "to": "2016-03-17", "days": "weekdays"},
        **extra,
    }


def test_a_weekday_profile_pools_units_and_charges_each_in_its_own_window(
    client: TestClient, app
) -> None:
    ds = _dataset(client)
    preview = client.post(f"/datasets/{ds}/releases/preview", json=_body())
    assert preview.status_code == 200, preview.text
    out = client.post(f"/datasets/{ds}/releases", json=_body())
    assert out.status_code == 200, out.text
    release = out.json()
    assert release["profile"]["n_days"] == 4  # Mon, Tue, Wed (no data), Thu
    assert release["profile"]["days"] == "weekdays"
    (grid,) = release["grids"]
    assert grid["slot_start"] == "08:00"
    # a unit per (bus, date): the three weekdays with data
    assert grid["n_users"] == N_BUSES * len(WEEKDAYS_WITH_DATA)
    assert grid["mean"]["privacy_unit"] == "user-day"
    assert release["useful"] == preview.json()["useful"]
    assert release["warnings"] == preview.json()["warnings"]
    # a profile cell is no stored grid: its id has no /grids endpoints, and says so
    queried = client.get(f"/grids/{grid['grid_id']}/mean", params={"epsilon": 0.1})
    assert queried.status_code == 404
    assert "profile release" in queried.json()["error"]["message"]
    accounts = _accounts(app, ds)
    assert {w for w, _ in accounts} == set(WEEKDAYS_WITH_DATA)
    assert len(accounts) == N_BUSES * len(WEEKDAYS_WITH_DATA)
    assert all(v <= Decimal("0.8") for v in accounts.values())
    # the same request again: the stored release, charged once
    again = client.post(f"/datasets/{ds}/releases", json=_body())
    assert again.json()["cached"] is True
    assert again.json()["release_id"] == release["release_id"]
    assert _accounts(app, ds) == accounts
    stored = client.get(f"/releases/{release['release_id']}").json()
    assert stored["profile"] == release["profile"] and stored["grids"][0]["slot_start"] == "08:00"
    csv = client.get(f"/releases/{release['release_id']}", params={"format": "csv"})
    assert csv.status_code == 200 and ",08:00," in csv.text
    listed = client.get(f"/datasets/{ds}/releases").json()["releases"]
    assert listed[0]["release_id"] == release["release_id"]
    assert listed[0]["profile"] == release["profile"] and listed[0]["slot_start"] == "08:00"
    geo = client.get(f"/releases/{release['release_id']}", params={"format": "geojson"}).json()
    assert geo["features"][0]["properties"]["slot_start"] == "08:00"
    package = client.get(f"/releases/{release['release_id']}", params={"format": "datapackage"})
    assert package.json()["privacy"]["profile"] == release["profile"]
    made_public = client.patch(f"/releases/{release['release_id']}", json={"public": True})
    assert made_public.status_code == 200, made_public.text
    catalogue = client.get("/", headers={"Authorization": ""})
    assert "typical weekday 08:00, 4 days" in catalogue.text


def test_without_a_window_the_unit_is_the_user_over_all_dates(client: TestClient, app) -> None:
    ds = _dataset(client, window="none", budget=5.0)
    out = client.post(f"/datasets/{ds}/releases", json=_body(slots=2))
    assert out.status_code == 200, out.text
    grids = out.json()["grids"]
    assert [g["slot_start"] for g in grids] == ["08:00", "09:00"]
    assert all(g["n_users"] == N_BUSES for g in grids)
    accounts = _accounts(app, ds)
    assert len(accounts) == N_BUSES  # one account per bus, all time
    assert all(v <= Decimal("0.8") for v in accounts.values())


def test_the_repeated_hour_of_a_25_hour_day_pools_both(client: TestClient, app) -> None:
    ds = make_dataset(client, timezone="America/Chicago", budget_window="day")
    fall = date(2016, 11, 6)  # 01:00-02:00 happens twice
    rows = _rows(date(2016, 11, 5), 1) + _rows(date(2016, 11, 7), 1)
    first = datetime(2016, 11, 6, 1, 5, tzinfo=ZONE)  # CDT
    second = datetime(2016, 11, 6, 1, 5, tzinfo=ZONE, fold=1)  # CST, an hour later
    assert second.astimezone(ZoneInfo("UTC")) - first.astimezone(ZoneInfo("UTC")) == timedelta(
        hours=1
    )
    for start in (first, second):
        for u in range(N_BUSES):
            when = start + timedelta(minutes=u)
            rows.append((f"bus{u}", when.isoformat(), *CELL_A, 3.0))
    assert upload_csv(client, ds, make_csv(rows))["rejected"] == 0
    body = _body(slot_start="01:00", profile={"from": "2016-11-05", "to": "2016-11-07"})
    out = client.post(f"/datasets/{ds}/releases", json=body)
    assert out.status_code == 200, out.text
    (grid,) = out.json()["grids"]
    assert grid["n_users"] == 3 * N_BUSES  # the 6th's two hours: one unit per bus
    windows = {w for w, _ in _accounts(app, ds)}
    assert windows == {date(2016, 11, 5), fall, date(2016, 11, 7)}


@pytest.fixture(scope="module")
def uncharged(shared_client: TestClient) -> int:
    """``_dataset`` for the refused profiles, which share it: none may charge anybody."""
    return _dataset(shared_client)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"profile": {"from": "2016-03-17", "to": "2016-03-12"}}, "profile.from"),
        ({"profile": {"from": "2016-03-12", "to": "2016-03-17", "days": "holidays"}}, "days"),
        ({"profile": {"from": "2016-03-12", "to": "2016-03-17", "days": [0, 8]}}, "days"),
        ({"profile": {"from": "2015-01-01", "to": "2016-03-17"}}, "longer than a year"),
        ({"profile": {"from": "2016-03-12", "to": "2016-03-12", "days": [1]}}, "profile.days"),
        ({"slot_start": "8am"}, "slot_start"),
        ({"slot_start": "08:30"}, "slot_start"),
        ({"slot_start": "23:00", "slots": 2}, "slots"),
        ({"slot_minutes": 90}, "slot_minutes"),
        ({"useful_width": -1}, "useful_width"),
    ],
)
def test_bad_profiles_are_refused_naming_the_field_and_charge_nobody(
    shared_client: TestClient, uncharged: int, change: dict, field: str
) -> None:
    client, ds = shared_client, uncharged
    for path in ("releases", "releases/preview"):
        resp = client.post(f"/datasets/{ds}/{path}", json=_body(**change))
        assert resp.status_code == 400, resp.text
        assert field in resp.json()["error"]["message"]
    assert _accounts(client.app, ds) == {}


def test_an_adaptive_profile_releases_disjoint_cells_of_enough_units(client: TestClient) -> None:
    ds = _dataset(client)
    body = _body(partition="adaptive", min_users=20, coarsest_resolution=6)
    out = client.post(f"/datasets/{ds}/releases", json=body)
    assert out.status_code == 200, out.text
    release = out.json()
    assert release["partition"] == "adaptive"
    assert all(g["n_users"] >= 20 for g in release["grids"])
    assert release["coverage"]["records"] == pytest.approx(1.0)
