"""SIGINT and SIGTERM end every ``dpgate`` command quietly: exit 128 + the signal's
number, no traceback, within seconds, whatever the command waits for (a server that
never answers, a database that never answers, its own server). Real subprocesses.
(``dpgate ingest`` stops after its poll under way: ``test_ingest_bounded``; ``dpgate
demo``: ``tests/integration/test_demo.py``.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.live_server import free_port
from tests.operations.test_ingest_pull import ROOT

SIGNALS = [signal.SIGINT, signal.SIGTERM]


def each_with_both_signals(argvs: list[list[str]]) -> list:
    """``(argv, signal)`` for every command and both signals; both signals stay in the
    default suite (alternating over the commands), the other pairs run with the slow
    tests (SIGINT and SIGTERM take two paths, but every command takes them alike)."""
    return [
        pytest.param(argv, sig, marks=() if i % 2 == j else pytest.mark.slow)
        for i, argv in enumerate(argvs)
        for j, sig in enumerate(SIGNALS)
    ]


@contextmanager
def silent_listener() -> Iterator[tuple[int, threading.Event]]:
    """A port that accepts connections and never answers; the event is set on the first."""
    sock = socket.create_server(("127.0.0.1", 0))
    accepted = threading.Event()
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
                accepted.set()
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        sock.close()


def signal_when_waiting(
    proc: subprocess.Popen, signum: signal.Signals, waited: threading.Event, settle: float = 0.3
) -> tuple[str, float]:
    """Once ``waited`` is set (and ``settle`` seconds more), send ``signum``; the
    command's output (stdout, with stderr merged) and how long it took to end."""
    try:
        assert waited.wait(60), "the command never started waiting"
        time.sleep(settle)
        proc.send_signal(signum)
        sent = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        return out, time.monotonic() - sent
    finally:
        proc.kill()


def _stop_quietly(
    proc: subprocess.Popen, signum: signal.Signals, waited: threading.Event, code: int | None = None
) -> str:
    """Send ``signum`` once the command waits; check it ends within 5 s, quietly, with
    ``code`` (default 128 + the signal's number)."""
    out, took = signal_when_waiting(proc, signum, waited)
    assert proc.returncode == (128 + signum if code is None else code), (proc.returncode, out)
    assert "Traceback" not in out, out
    assert took < 5.0, took
    return out


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", *argv],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "signum"),
    each_with_both_signals(
        [
            ["publish", "--dataset", "1", "--day", "2024-03-05", "--epsilon", "1"],
            ["budget", "reset", "--dataset", "1", "--reason", "r"],
        ]
    ),
)
def test_a_server_command_waiting_for_an_answer(argv: list[str], signum: signal.Signals) -> None:
    with silent_listener() as (port, accepted):
        env = {**os.environ, "DPGATE_URL": f"http://127.0.0.1:{port}", "DPGATE_KEY": "k"}
        _stop_quietly(_start(argv, env), signum, accepted)


@pytest.mark.parametrize(
    ("argv", "signum"), each_with_both_signals([["keys", "list"], ["migrate"]])
)
def test_a_database_command_waiting_for_its_database(
    argv: list[str], signum: signal.Signals
) -> None:
    with silent_listener() as (port, accepted):
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"
        env = {**os.environ, "DPGATE_DATABASE_URL": url, "DPGATE_SECRET_KEY": "s"}
        _stop_quietly(_start(argv, env), signum, accepted)


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_serve_stops_gracefully_and_quietly(
    migrated_postgres_url: str, tmp_path: Path, signum: signal.Signals
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DPGATE_DATABASE_URL": migrated_postgres_url,
        "DPGATE_SECRET_KEY": "test-secret",
        "DPGATE_LOG_FORMAT": "text",
    }
    proc = _start(["serve", "--port", str(port)], env)
    serving = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    serving.set()
                    return
            except httpx.HTTPError:
                time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    _stop_quietly(proc, signum, serving, code=0)  # stopped gracefully, as asked
