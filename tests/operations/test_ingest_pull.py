"""``dpgate ingest gtfs-rt``: polling a feed served by a local HTTP server (built from
CapMetrics rows) adds what is new, counts a vehicle's repeated timestamp as a duplicate
(across polls too), survives a feed that is down or sends garbage, and stops cleanly on
SIGTERM with the poll under way committed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.cli.main import main
from app.config import get_settings
from tests.gtfs_support import (
    FeedServer,
    contents,
    feed_message,
    held_out_rows,
    made_rows,
    positions_csv,
    sequence,
    sliding,
    windows,
)
from tests.helpers import create_dataset, upload_csv

ROOT = Path(__file__).resolve().parents[2]
CAPMETRICS_DATASET = {"value_bound": 30.0, "timezone": "America/Chicago"}


@pytest.fixture
def database_env(migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI's settings: the test's database and the app's hashing secret."""
    monkeypatch.setenv("DPGATE_DATABASE_URL", migrated_postgres_url)
    monkeypatch.setenv("DPGATE_SECRET_KEY", "test-secret")
    monkeypatch.setenv("DPGATE_LOG_FORMAT", "text")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def pull(url: str, dataset: int, *extra: str) -> int:
    return main(["ingest", "gtfs-rt", url, "--dataset", str(dataset), *extra])


def test_help_shows_every_option_and_default(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", "gtfs-rt", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for shown in ("--every", "(default: poll once)", "--polls", "(default: 30.0)", "SIGTERM"):
        assert shown in out, out


def check_pull_gives_the_csv_grids(pg_client: TestClient, rows: list[dict[str, str]]) -> None:
    app = pg_client.app
    ds_csv = create_dataset(pg_client, **CAPMETRICS_DATASET)["id"]
    ds_pull = create_dataset(pg_client, **CAPMETRICS_DATASET)["id"]
    as_csv = upload_csv(pg_client, ds_csv, positions_csv(rows))
    bodies = sliding(rows)  # each poll repeats the previous window: duplicates across polls
    server = FeedServer(sequence(bodies))
    with server.running():
        assert pull(server.url, ds_pull, "--every", "0.001", "--polls", str(len(bodies))) == 0
    assert server.requests == len(bodies)
    assert contents(app, ds_pull) == contents(app, ds_csv)  # type: ignore[arg-type]
    assert len(contents(app, ds_pull)[1]) == as_csv["accepted"] > 500  # type: ignore[arg-type]


def test_held_out_twenty_minutes_pulled_give_the_csv_grids(database_env, pg_client) -> None:
    check_pull_gives_the_csv_grids(pg_client, held_out_rows((8, 8 + 1 / 3)))


@pytest.mark.slow
def test_held_out_day_pulled_gives_the_csv_grids(database_env, pg_client) -> None:
    check_pull_gives_the_csv_grids(pg_client, held_out_rows())


def test_a_feed_down_or_garbage_is_survived(database_env, pg_client, capsys) -> None:
    rows = made_rows(240)
    parts = windows(rows, 600)
    first, second = feed_message(parts[0]), feed_message(parts[0] + parts[1])
    served = [503, b"\x0a\x05garbage", first, first, second, 404]
    ds = create_dataset(pg_client, **CAPMETRICS_DATASET)["id"]
    server = FeedServer(sequence(served))
    with server.running():
        assert pull(server.url, ds, "--every", "0.001", "--polls", str(len(served))) == 0
        assert server.requests == len(served)
        assert pull(server.url, ds) == 1  # once, and the feed answers 404: exit 1
    n = len(parts[0]) + len(parts[1])
    assert len(contents(pg_client.app, ds)[1]) == n  # type: ignore[arg-type]
    text = capsys.readouterr().err  # the CLI's log lines
    assert "answered 503" in text and "not a GTFS-Realtime FeedMessage" in text
    assert "feed unchanged" in text and f"{len(parts[1])} new, {len(parts[0])} already" in text


def test_once_without_every_and_refusals(database_env, pg_client, capsys) -> None:
    ds = create_dataset(pg_client, **CAPMETRICS_DATASET)["id"]
    server = FeedServer(sequence([feed_message(made_rows(20))]))
    with server.running():
        assert pull(server.url, ds) == 0
        assert server.requests == 1
        assert pull(server.url, 999) == 2
        assert "no dataset 999" in capsys.readouterr().err
        assert pull(server.url, ds, "--drop-zero") == 2  # the dataset's value filters are private
        assert "value_filters_public" in capsys.readouterr().err
    assert len(contents(pg_client.app, ds)[1]) == 20  # type: ignore[arg-type]
    assert pull("http://127.0.0.1:9/feed", ds, "--timeout", "2") == 1  # nothing listens


def test_sigterm_finishes_the_poll_under_way_and_exits_0(
    database_env, pg_client, migrated_postgres_url: str
) -> None:
    rows = made_rows(400)
    parts = windows(rows, 300)
    bodies = [feed_message(p) for p in parts]
    second_asked = threading.Event()
    requests: list[int] = []

    def slow_next() -> bytes:  # the second poll's feed takes half a second to come
        requests.append(1)
        if len(requests) == 2:
            second_asked.set()
            time.sleep(0.5)  # within the fetch's grace after a stop (STOP_GRACE)
        return bodies[min(len(requests), len(bodies)) - 1]

    ds = create_dataset(pg_client, **CAPMETRICS_DATASET)["id"]
    env = {**os.environ, "DPGATE_DATABASE_URL": migrated_postgres_url, "DPGATE_LOG_FORMAT": "json"}
    server = FeedServer(slow_next)
    with server.running():
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "ingest", "gtfs-rt", server.url,
             "--dataset", str(ds), "--every", "0.05"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert second_asked.wait(60), "the poller never polled twice"
            proc.send_signal(signal.SIGTERM)  # while the second poll waits for its feed
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line JSON
    messages = [r["message"] for r in records if r["logger"].startswith("dpgate")]
    assert "SIGTERM: stopping after the poll under way" in messages, messages
    polls = [m for m in messages if m.startswith(f"dataset {ds}: ") and " new, " in m]
    assert len(polls) == 2, messages  # each poll's line, as JSON
    assert len(requests) == 2  # no poll after the signal
    stored = len(contents(pg_client.app, ds)[1])  # type: ignore[arg-type]
    assert stored == len(parts[0]) + len(parts[1])  # the poll under way was committed
