"""``dpgate demo --port <busy>`` fails fast: a clear message, exit status 2, nothing made."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from app.cli.demo import port_problem


def _command() -> list[str]:
    exe = Path(sys.executable).parent / "dpgate"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli"]


def test_a_busy_port_stops_the_demo_before_anything_is_created(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPGATE_")}
        done = subprocess.run(
            [*_command(), "demo", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2, done
    assert f"127.0.0.1:{port}" in done.stderr and "--port" in done.stderr
    assert "key" not in done.stdout and "curl" not in done.stdout  # nothing printed
    assert list(tmp_path.iterdir()) == []  # no database, no secret file


def test_port_problem() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert "cannot listen on 127.0.0.1" in (port_problem("127.0.0.1", port) or "")
    assert port_problem("127.0.0.1", port) is None  # free again once released
    assert "cannot resolve" in (port_problem("no-such-host.invalid", 80) or "")
