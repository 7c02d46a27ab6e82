"""``dpgate ingest gtfs-rt`` against a feed that trickles its body: ``--timeout`` bounds
the whole fetch (not each read), and SIGTERM ends the command within 3 s whatever the
feed does. A real HTTP server on the loopback, a real subprocess."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest

from tests.helpers import create_dataset
from tests.operations.test_cli_signals import signal_when_waiting
from tests.operations.test_ingest_pull import CAPMETRICS_DATASET, ROOT

TRICKLE_SECONDS = 0.5  # between two bytes: each read is quick, the body never ends
TIMEOUT = 1  # --timeout: twice the time between two bytes, so no single read reaches it
TRICKLE_FOR = 60.0  # the server gives up after this (the test never waits that long)


class Asked(threading.Event):
    at: float = 0.0  # when the first request arrived (time.time)


@contextmanager
def trickling_feed() -> Iterator[tuple[str, Asked]]:
    """A feed whose answer announces 10⁶ bytes and sends one byte every half second;
    ``Asked`` is set when the first request arrives."""
    asked = Asked()
    done = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.at = asked.at or time.time()  # wall clock, as the log lines' times
            asked.set()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            ends = time.monotonic() + TRICKLE_FOR
            try:
                while not done.is_set() and time.monotonic() < ends:
                    self.wfile.write(b"\x0a")
                    self.wfile.flush()
                    done.wait(TRICKLE_SECONDS)
            except OSError:  # the poller hung up
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # shutdown() waits for the next poll: 0.01 s, not the default 0.5 s
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/feed", asked
    finally:
        done.set()
        server.shutdown()
        server.server_close()
        thread.join()


def _command(url: str, dataset: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", "ingest", "gtfs-rt", url, "--dataset",
            str(dataset), *extra]  # fmt: skip


@pytest.fixture
def cli_env(migrated_postgres_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DPGATE_DATABASE_URL": migrated_postgres_url,
        "DPGATE_SECRET_KEY": "test-secret",
        "DPGATE_LOG_FORMAT": "text",
    }


def test_a_trickling_feed_ends_the_poll_within_its_timeout(pg_client, cli_env) -> None:
    ds = create_dataset(pg_client, **CAPMETRICS_DATASET)["id"]
    with trickling_feed() as (url, asked):
        done = subprocess.run(
            _command(url, ds, "--timeout", str(TIMEOUT)),
            cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the only poll failed
    assert "Traceback" not in done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if "did not arrive whole" in ln]
    assert f"(--timeout {TIMEOUT} s)" in line
    gave_up = datetime.fromisoformat(line.split()[0]).timestamp()
    # the poll began before the request reached the feed, and ended when it gave up
    assert asked.is_set() and gave_up - asked.at <= TIMEOUT + 1, gave_up - asked.at


# the CLI's two signal paths are both in tests/operations/test_cli_signals.py
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_a_signal_ends_the_command_within_3_s_whatever_the_feed_does(
    pg_client, cli_env, signum: signal.Signals
) -> None:
    ds = create_dataset(pg_client, **CAPMETRICS_DATASET)["id"]
    with trickling_feed() as (url, asked):
        proc = subprocess.Popen(
            _command(url, ds, "--every", "1", "--timeout", "600"),
            cwd=ROOT, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        err, took = signal_when_waiting(proc, signum, asked, settle=0.5)  # a byte or two read
    assert proc.returncode == 0, err
    assert took < 3.0, took
    assert "Traceback" not in err
    assert f"{signum.name}: stopping after the poll under way" in err
    assert "did not arrive whole in time (stopping)" in err
