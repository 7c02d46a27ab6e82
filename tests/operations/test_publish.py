"""``dpgate publish`` against ``dpgate serve``: a whole local day in one release, run twice
and charged once, exit codes a scheduler can act on (API.md, issue 25)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
from sqlalchemy.engine import Engine, make_url

from app.cli.main import main
from app.cli.publish import day_slots, epsilon_text
from app.cli.support import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)
from tests.conftest import ADMIN_KEY
from tests.helpers import make_csv
from tests.live_server import LiveServer, free_port, live_server

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
ZONE = ZoneInfo("America/Chicago")
DAY = date(2024, 3, 5)


@pytest.fixture(scope="module")
def served(
    postgres_base_url: str, postgres_admin: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, int]]:
    schema = "t_pub_" + uuid.uuid4().hex[:12]
    with postgres_admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    url = make_url(postgres_base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        with live_server(
            url.render_as_string(hide_password=False),
            tmp_path_factory.mktemp("publish"),
            workers=1,
        ) as server:
            yield server, _load(server)
    finally:
        with postgres_admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


def _load(server: LiveServer) -> int:
    """A Chicago dataset with 12 buses in one cell at 06:00, 07:00 and 23:00 local."""
    with httpx.Client(base_url=server.url, headers=ADMIN, timeout=30) as http:
        ds = http.post(
            "/datasets",
            json={
                "name": "pub",
                "value_bound": 10.0,
                "budget_per_user": 3.0,
                "timezone": "America/Chicago",
            },
        ).json()["id"]
        rows = []
        for hour in (6, 7, 23):
            start = datetime(DAY.year, DAY.month, DAY.day, hour, 5, tzinfo=ZONE)
            for bus in range(12):
                for i in range(3):
                    when = start + timedelta(seconds=60 * i + bus)
                    rows.append((f"b{bus}", when.isoformat(), 30.2672, -97.7431, float(i)))
        resp = http.post(
            f"/datasets/{ds}/records",
            content=make_csv(rows).encode(),
            headers={"Content-Type": "text/csv"},
        )
        assert resp.status_code == 200 and resp.json()["rejected"] == 0, resp.text
    return int(ds)


def _publish(server_url: str, ds: int, *extra: str) -> int:
    argv = ["publish", "--url", server_url, "--key", ADMIN_KEY, "--dataset", str(ds)]
    return main([*argv, "--day", DAY.isoformat(), "--min-users", "5", *extra])


def _ledger(server: LiveServer, ds: int) -> list[dict]:
    with httpx.Client(base_url=server.url, headers=ADMIN, timeout=30) as http:
        return http.get(f"/datasets/{ds}/ledger", params={"limit": 10_000}).json()["users"]


def test_a_day_is_one_release_and_a_second_run_charges_nothing(
    served: tuple[LiveServer, int], capsys: pytest.CaptureFixture[str]
) -> None:
    server, ds = served
    assert _publish(server.url, ds, "--max-user-cost", "1.5") == EXIT_OK
    first = capsys.readouterr()
    assert "24 slots, 3 grids" in first.out, first
    assert re.search(r"3 grids, epsilon \S+ per grid, max user cost 1.5", first.out), first
    spent = {u["user"]: u["spent"] for u in _ledger(server, ds)}
    assert len(spent) == 12 and max(spent.values()) <= 1.5
    for slot in ("06:00", "07:00", "23:00"):
        assert f"T{slot}:00-06:00  1 grid(s) released" in first.err
    assert _publish(server.url, ds, "--max-user-cost", "1.5") == EXIT_OK
    assert "already released: nothing charged" in capsys.readouterr().out
    assert {u["user"]: u["spent"] for u in _ledger(server, ds)} == spent
    # the budget (3 per user) cannot pay another 1.5 for each of three grids at eps 1
    assert _publish(server.url, ds, "--epsilon", "1.0") == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "refused" in err and "/quote" not in err, err  # a day is not one grid
    fits = re.search(r"largest_epsilon = (\S+) per grid: --epsilon (\S+) would fit now", err)
    assert fits is not None and fits[1] == fits[2] and 0 < float(fits[2]) < 1.0, err
    assert _publish(server.url, ds, "--epsilon", fits[2]) == EXIT_OK  # and it does fit


def test_exit_codes_for_a_scheduler(
    served: tuple[LiveServer, int], capsys: pytest.CaptureFixture[str]
) -> None:
    server, ds = served
    argv = ["publish", "--url", server.url, "--key", ADMIN_KEY, "--epsilon", "0.1"]
    assert main([*argv, "--dataset", str(ds), "--day", "2030-01-01"]) == EXIT_NOT_FOUND
    assert main([*argv, "--dataset", str(ds + 99), "--day", "2024-03-05"]) == EXIT_NOT_FOUND
    bad = ["--dataset", str(ds), "--day", "2024-03-05", "--coarsest-resolution", "5"]
    assert main([*argv, *bad]) == EXIT_USAGE  # coarsest without adaptive: a 400
    dead = f"http://127.0.0.1:{free_port()}"
    refused = ["publish", "--url", dead, "--key", ADMIN_KEY, "--epsilon", "0.1"]
    assert main([*refused, "--dataset", "1", "--day", "2024-03-05"]) == EXIT_UNAVAILABLE
    assert "cannot reach" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["publish", "--dataset", "1", "--day", "2024-03-05"])  # no budget flag
    assert usage.value.code == 2


@pytest.mark.parametrize(
    ("day", "zone", "minutes", "slots"),
    [
        (date(2024, 3, 5), "America/Chicago", 60, 24),
        (date(2024, 3, 10), "America/Chicago", 60, 23),  # spring forward
        (date(2024, 11, 3), "America/Chicago", 60, 25),  # fall back
        (date(2024, 11, 3), "America/Chicago", 15, 100),
        (date(2024, 3, 31), "Europe/Berlin", 30, 46),
        (date(2024, 3, 10), "UTC", 60, 24),
    ],
)
def test_the_days_slots_follow_its_timezone(day: date, zone: str, minutes: int, slots: int) -> None:
    assert day_slots(day, zone, minutes) == slots


def test_the_printed_epsilon_is_each_grids_own() -> None:
    """With per-cell epsilon (docs/math.md §6.10) the release's ``epsilon`` is the quantum
    and each grid's epsilon the sum of its statistics': the line gives their range."""

    def grid(*eps: float) -> dict[str, dict[str, float]]:
        return {s: {"epsilon": e} for s, e in zip(("mean", "user_mean"), eps, strict=False)}

    per_cell = {"epsilon": 0.03125, "grids": [grid(0.0625, 0.0625), grid(0.25, 0.25)]}
    assert epsilon_text(per_cell) == "per-cell epsilon 0.125 to 0.5 (whole quanta of 0.03125)"
    equal = {"epsilon": 0.03125, "grids": [grid(0.125), grid(0.125)]}  # five quanta each
    assert epsilon_text(equal) == "epsilon 0.125 per grid"
    assert epsilon_text({"epsilon": 0.5, "grids": []}) == "epsilon 0.5 per grid"


def test_a_profile_of_the_last_weeks_weekdays_for_cron(
    served: tuple[LiveServer, int], capsys: pytest.CaptureFixture[str]
) -> None:
    server, _ = served
    ds = _load(server)  # a dataset of its own: the other tests spend the first one's budget
    argv = ["publish", "--url", server.url, "--key", ADMIN_KEY, "--dataset", str(ds)]
    profile = ["--profile", "weekdays", "--weeks", "1", "--time", "06:00", "--slots", "2"]
    run = [*argv, "--day", DAY.isoformat(), *profile, "--max-user-cost", "1", "--min-users", "5"]
    assert main(run) == EXIT_OK
    out = capsys.readouterr().out
    assert "typical day 2024-02-28 to 2024-03-05 (5 dates)" in out, out
    assert "2 grids" in out and re.search(r"useful: \d+% of the records", out), out
    spent = {u["user"]: u["spent"] for u in _ledger(server, ds)}
    assert len(spent) == 12 and max(spent.values()) <= 1
    assert main(run) == EXIT_OK  # cron again: the stored release, charged once
    assert "already released: nothing charged" in capsys.readouterr().out
    assert {u["user"]: u["spent"] for u in _ledger(server, ds)} == spent
    assert main([*argv, "--epsilon", "0.1"]) == EXIT_USAGE  # neither --day nor --profile
