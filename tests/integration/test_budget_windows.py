"""Budget windows through HTTP (API.md: ``budget_window``, the budget and ledger
``window``, ``privacy_unit``): a grid is charged to the window its slot lies in, in
the dataset's timezone, and a user's spend within each window never passes
``budget_per_user``. Checked against the ledger's rows in the database."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from app.ledger.models import BudgetAccount, BudgetReset, LedgerEntry
from app.releases.packing import pack, unpack
from app.time.budget_windows import window_start
from tests.helpers import make_csv, upload_csv
from tests.integration.grid_fixtures import CELL_A, make_dataset

ZONE = "America/Chicago"
DAY1, DAY2 = date(2016, 11, 25), date(2016, 11, 26)
#: local 22:00 and 23:00 on DAY1, 00:00 and 01:00 on DAY2 (04:00-07:00 UTC on DAY2)
FIRST = datetime(2016, 11, 25, 22, tzinfo=ZoneInfo(ZONE))
HOURS = [FIRST + timedelta(hours=h) for h in range(4)]
N_USERS = 12


def _csv() -> str:
    rows = []
    for h, start in enumerate(HOURS):
        for u in range(N_USERS):
            for i in range(3):
                when = start + timedelta(minutes=10 * i + u % 7, seconds=1)
                rows.append((f"bus{u}", when.isoformat(), *CELL_A, float((u + h + i) % 10)))
    return make_csv(rows)


def _dataset(client: TestClient, **overrides: object) -> tuple[int, dict[datetime, str]]:
    """A dataset of the four hours (one cell); the grid id of each hour."""
    settings = {"timezone": ZONE, "budget_window": "day", "budget_per_user": 1.0, **overrides}
    ds = make_dataset(client, **settings)
    assert upload_csv(client, ds, _csv())["rejected"] == 0
    grids = client.get(f"/datasets/{ds}/grids").json()["grids"]
    return ds, {datetime.fromisoformat(g["slot_start"]): g["grid_id"] for g in grids}


def _mean(client: TestClient, grid: str, eps: float, **params: object):
    return client.get(
        f"/grids/{grid}/mean", params={"epsilon": eps, "mechanism": "baseline", **params}
    )


def _accounts(app, ds: int) -> dict[tuple[date, int], Decimal]:
    """(window, user) -> spend, checked against the sum of the ledger entries."""
    with app.state.sessionmaker() as s:
        rows = s.execute(
            select(BudgetAccount.window_start, BudgetAccount.user_id, BudgetAccount.spent).where(
                BudgetAccount.dataset_id == ds, BudgetAccount.epoch == 1
            )
        ).all()
        entries = s.scalars(
            select(LedgerEntry).where(LedgerEntry.dataset_id == ds, LedgerEntry.epoch == 1)
        ).all()
    from_entries: Counter = Counter()
    for e in entries:
        for u in e.users:
            from_entries[(e.window_start, u)] += e.epsilon
    accounts = {(w, u): s for w, u, s in rows}
    assert {k: v for k, v in accounts.items() if v} == dict(from_entries), "ledger != accounts"
    return accounts


def _error(resp, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()["error"]
    assert body["code"] == code
    return body


def test_a_dataset_says_its_window_and_privacy_unit(client: TestClient) -> None:
    created = client.post(
        "/datasets",
        json={"name": "w", "value_bound": 10, "budget_per_user": 1, "budget_window": "week"},
    )
    assert created.status_code == 201, created.text
    assert (created.json()["budget_window"], created.json()["privacy_unit"]) == (
        "week",
        "user-week",
    )
    plain = make_dataset(client)
    listed = {d["id"]: d for d in client.get("/datasets").json()["datasets"]}
    assert (listed[plain]["budget_window"], listed[plain]["privacy_unit"]) == ("none", "user")
    bad = client.post(
        "/datasets",
        json={"name": "w", "value_bound": 10, "budget_per_user": 1, "budget_window": "hour"},
    )
    assert bad.status_code in (400, 422) and "budget_window" in bad.json()["error"]["message"]


def test_queries_charge_the_window_of_their_grid_s_local_day(client: TestClient, app) -> None:
    ds, grids = _dataset(client)
    late, midnight = grids[HOURS[1]], grids[HOURS[2]]  # 23:00 on DAY1, 00:00 on DAY2
    first = _mean(client, late, 0.6)
    assert first.status_code == 200, first.text
    assert first.json()["privacy_unit"] == "user-day"
    # same users, 0.6 + 0.6 > 1, but another day: its own window
    assert _mean(client, midnight, 0.6).status_code == 200
    refused = _error(_mean(client, grids[HOURS[0]], 0.6), 403, "budget_exhausted")
    assert refused["largest_epsilon"] == pytest.approx(0.4)
    assert _mean(client, grids[HOURS[0]], 0.4).status_code == 200
    accounts = _accounts(app, ds)
    assert set(accounts.values()) == {Decimal("1.000000000000"), Decimal("0.600000000000")}
    assert {w for w, _ in accounts} == {DAY1, DAY2}
    assert all(s == Decimal(1) for (w, _), s in accounts.items() if w == DAY1)
    assert all(s == Decimal("0.6") for (w, _), s in accounts.items() if w == DAY2)
    cached = _mean(client, late, 0.6).json()
    assert cached["cached"] is True and cached["privacy_unit"] == "user-day"


def test_without_a_window_the_same_queries_share_one_budget(client: TestClient) -> None:
    _, grids = _dataset(client, budget_window="none")
    assert _mean(client, grids[HOURS[1]], 0.6).json()["privacy_unit"] == "user"
    _error(_mean(client, grids[HOURS[2]], 0.6), 403, "budget_exhausted")


def test_exclude_leaves_out_only_the_users_exhausted_in_the_grid_s_window(
    client: TestClient,
) -> None:
    _, grids = _dataset(client, on_exhausted="exclude")
    assert _mean(client, grids[HOURS[1]], 1.0).json()["n_users_charged"] == N_USERS
    assert _mean(client, grids[HOURS[2]], 1.0).json()["n_users_charged"] == N_USERS
    _error(_mean(client, grids[HOURS[0]], 0.1), 403, "budget_exhausted")


def test_a_release_across_windows_excludes_a_user_only_where_it_cannot_pay(
    client: TestClient, app
) -> None:
    """``exclude``: users exhausted on day 1 are left out of day 1's grids of a release
    across midnight, and kept (and charged) in day 2's, where they can still pay."""
    ds, grids = _dataset(client, on_exhausted="exclude")
    assert _mean(client, grids[HOURS[0]], 0.9).json()["n_users_charged"] == N_USERS
    body = {"slot_start": HOURS[0].isoformat(), "slots": 4, "epsilon": 0.05, "min_users": 3}
    out = client.post(f"/datasets/{ds}/releases", json=body)
    assert out.status_code == 200, out.text
    by_hour = {datetime.fromisoformat(g["slot_start"]): g for g in out.json()["grids"]}
    assert len(by_hour) == 4
    for hour in HOURS[:2]:  # day 1: 0.9 spent, 0.05 + 0.05 more fits everyone (0.1 left)
        assert by_hour[hour]["n_users_suppressed"] == 0
    again = client.post(f"/datasets/{ds}/releases", json={**body, "epsilon": 0.06})
    assert again.status_code == 200, again.text
    by_hour = {datetime.fromisoformat(g["slot_start"]): g for g in again.json()["grids"]}
    # day 1 has 0.0 left: every user is left out of day 1's grids (withheld) ...
    assert all(datetime.fromisoformat(g["slot_start"]) >= HOURS[2] for g in again.json()["grids"])
    # ... and nobody is left out of day 2's, where 0.9 is left
    for hour in HOURS[2:]:
        assert by_hour[hour]["n_users_suppressed"] == 0 and by_hour[hour]["n_users"] == N_USERS
    accounts = _accounts(app, ds)
    assert {s for (w, _), s in accounts.items() if w == DAY1} == {Decimal(1)}
    assert {s for (w, _), s in accounts.items() if w == DAY2} == {Decimal("0.22")}


def test_releasing_two_days_charges_each_day_s_window_never_the_other_s(
    client: TestClient, app
) -> None:
    ds, _ = _dataset(client)
    day1 = {"slot_start": HOURS[0].isoformat(), "slots": 2, "max_user_cost": 1.0, "min_users": 3}
    day2 = {**day1, "slot_start": HOURS[2].isoformat()}
    out1 = client.post(f"/datasets/{ds}/releases", json=day1)
    assert out1.status_code == 200, out1.text
    after1 = _accounts(app, ds)
    assert {w for w, _ in after1} == {DAY1} and max(after1.values()) <= Decimal(1)
    out2 = client.post(f"/datasets/{ds}/releases", json=day2)
    assert out2.status_code == 200, out2.text
    after2 = _accounts(app, ds)
    assert {k: v for k, v in after2.items() if k[0] == DAY1} == after1  # day 1 untouched
    assert max(after2.values()) <= Decimal(1)
    for grid in out2.json()["grids"]:
        assert grid["mean"]["privacy_unit"] == "user-day"
    # both days are spent up to max_user_cost 1 = the cap: no more in either
    again = {**day1, "max_user_cost": None, "epsilon": 0.01}
    _error(client.post(f"/datasets/{ds}/releases", json=again), 403, "budget_exhausted")
    across = {**again, "slot_start": HOURS[1].isoformat()}
    _error(client.post(f"/datasets/{ds}/releases", json=across), 403, "budget_exhausted")
    assert _accounts(app, ds) == after2


def test_a_release_across_midnight_charges_each_grid_to_its_day(client: TestClient, app) -> None:
    """One release of the four hours: planned jointly (max_user_cost over all of them)
    but each grid is charged to its local day, and no day passes the cap."""
    ds, _ = _dataset(client)
    body = {"slot_start": HOURS[0].isoformat(), "slots": 4, "epsilon": 0.45, "min_users": 3}
    out = client.post(f"/datasets/{ds}/releases", json=body)
    assert out.status_code == 200, out.text
    assert out.json()["K"] == 4  # every user in all four grids: 1.8 over the release
    accounts = _accounts(app, ds)
    assert set(accounts.values()) == {Decimal("0.9")}  # two grids in each day
    assert {w for w, _ in accounts} == {DAY1, DAY2}
    with app.state.sessionmaker() as s:
        windows = set(
            s.scalars(select(LedgerEntry.window_start).where(LedgerEntry.dataset_id == ds))
        )
    assert windows == {DAY1, DAY2}
    # the preview sees 0.1 left in each day: 0.05 per grid fits, 0.06 does not
    preview = client.post(f"/datasets/{ds}/releases/preview", json={**body, "epsilon": 0.06})
    assert preview.status_code == 200, preview.text
    assert preview.json()["users_over_budget"] == N_USERS
    assert preview.json()["largest_epsilon"] == pytest.approx(0.05)
    fits = client.post(f"/datasets/{ds}/releases", json={**body, "epsilon": 0.05})
    assert fits.status_code == 200, fits.text
    assert set(_accounts(app, ds).values()) == {Decimal(1)}


def test_budget_and_ledger_take_the_window(client: TestClient, app) -> None:
    ds, grids = _dataset(client)
    zone = ZoneInfo(ZONE)
    before = window_start("day", datetime.now(UTC).astimezone(zone).date())
    empty = client.get(f"/datasets/{ds}/budget").json()  # nothing spent: today's window
    after = window_start("day", datetime.now(UTC).astimezone(zone).date())
    assert empty["window"] in {before.isoformat(), after.isoformat()}
    assert (empty["max_spent"], empty["privacy_unit"]) == (0, "user-day")
    assert _mean(client, grids[HOURS[1]], 0.3).status_code == 200
    assert _mean(client, grids[HOURS[2]], 0.5).status_code == 200
    # without window: the one where a user spent the most
    shown = client.get(f"/datasets/{ds}/budget").json()
    assert (shown["window"], shown["max_spent"]) == ("2016-11-26", 0.5)
    day1 = client.get(f"/datasets/{ds}/budget", params={"window": "2016-11-25"}).json()
    assert (day1["window"], day1["max_spent"], day1["users_charged"]) == (
        "2016-11-25",
        0.3,
        N_USERS,
    )
    # an instant is read as its local date: 05:00 UTC on the 26th is the 25th in Chicago
    utc = client.get(f"/datasets/{ds}/budget", params={"window": "2016-11-26T05:00:00Z"})
    assert utc.json()["window"] == "2016-11-25"
    ledger = client.get(f"/datasets/{ds}/ledger", params={"window": "2016-11-25"}).json()
    assert ledger["window"] == "2016-11-25" and ledger["total"] == N_USERS
    assert {u["spent_exact"] for u in ledger["users"]} == {"0.300000000000"}
    assert client.get(f"/datasets/{ds}/ledger").json()["window"] == "2016-11-26"
    nothing = client.get(f"/datasets/{ds}/ledger", params={"window": "2016-11-24"}).json()
    assert (nothing["total"], nothing["users"]) == (0, [])
    for bad in ("2016-11-31", "tomorrow"):
        body = _error(client.get(f"/datasets/{ds}/budget", params={"window": bad}), 400,
                      "invalid_request")  # fmt: skip
        assert "window" in body["message"]
    plain = make_dataset(client)
    body = _error(
        client.get(f"/datasets/{plain}/ledger", params={"window": "2016-11-25"}),
        400,
        "invalid_request",
    )
    assert "budget_window" in body["message"]
    unwindowed = client.get(f"/datasets/{plain}/budget").json()
    assert (unwindowed["window"], unwindowed["privacy_unit"]) == (None, "user")


def test_a_reset_opens_every_window_afresh_and_is_recorded(client: TestClient, app) -> None:
    ds, grids = _dataset(client)
    assert _mean(client, grids[HOURS[1]], 1.0).status_code == 200
    assert _mean(client, grids[HOURS[2]], 1.0).status_code == 200
    _error(_mean(client, grids[HOURS[0]], 0.1), 403, "budget_exhausted")
    reset = client.post(f"/datasets/{ds}/budget/reset", json={"reason": "new month"})
    assert reset.status_code == 200 and reset.json()["epoch"] == 2
    for hour in (HOURS[0], HOURS[3]):
        assert _mean(client, grids[hour], 1.0).status_code == 200
    for day in ("2016-11-25", "2016-11-26"):
        budget = client.get(f"/datasets/{ds}/budget", params={"window": day}).json()
        assert (budget["epoch"], budget["max_spent"]) == (2, 1.0)
    old = client.get(f"/datasets/{ds}/ledger", params={"window": "2016-11-25", "epoch": 1})
    assert {u["spent_exact"] for u in old.json()["users"]} == {"1.000000000000"}
    with app.state.sessionmaker() as s:
        resets = s.scalars(select(BudgetReset).where(BudgetReset.dataset_id == ds)).all()
    assert [(r.from_epoch, r.to_epoch, r.reason) for r in resets] == [(1, 2, "new month")]


def test_stored_answers_without_privacy_unit_are_served_with_it(client: TestClient, app) -> None:
    """Answers and releases stored before ``privacy_unit`` existed (the field removed
    from their stored JSON here) are served with it."""
    ds, grids = _dataset(client)
    grid = grids[HOURS[1]]
    fresh = _mean(client, grid, 0.2).json()
    body = {"slot_start": HOURS[2].isoformat(), "epsilon": 0.2, "min_users": 3}
    release = client.post(f"/datasets/{ds}/releases", json=body).json()
    with app.state.engine.begin() as conn:
        conn.execute(
            text("UPDATE query_answers SET answer = (answer::jsonb - 'privacy_unit')::json")
        )
        stored = conn.execute(text("SELECT grids FROM slot_releases")).scalar_one()
        grids = json.loads(unpack(stored))
        for g in grids:
            for stat in ("mean", "variance"):
                g[stat].pop("privacy_unit")
        conn.execute(  # as stored before migration 0014: shape 0, upgraded when served
            text("UPDATE slot_releases SET grids = :g, grids_shape = 0"),
            {"g": pack(json.dumps(grids).encode())},
        )
        stored = conn.execute(text("SELECT grids FROM slot_releases")).scalar_one()
        assert b"privacy_unit" not in unpack(stored)
    assert _mean(client, grid, 0.2).json()["privacy_unit"] == "user-day"
    listed = client.get("/queries").json()["queries"]
    assert [a["answer"]["privacy_unit"] for a in listed] == ["user-day"]
    assert [a["answer"]["query_id"] for a in listed] == [fresh["query_id"]]
    for again in (
        client.get(f"/releases/{release['release_id']}").json(),
        client.post(f"/datasets/{ds}/releases", json=body).json(),
    ):
        assert again["cached"] is True
        assert [g["mean"]["privacy_unit"] for g in again["grids"]] == ["user-day"]


def test_the_openapi_says_what_the_privacy_unit_is(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    unit = schemas["StatisticAnswer"]["properties"]["privacy_unit"]["description"]
    assert "one user's records in one window" in unit and "docs/math.md §10.4" in unit
    assert (
        "one user in one window"
        in schemas["DatasetCreate"]["properties"]["budget_window"]["description"]
    )
    params = spec["paths"]["/datasets/{dataset_id}/budget"]["get"]["parameters"]
    assert "window" in {p["name"] for p in params}
