"""``dpgate demo`` end to end: start it, paste its curl commands, run it again.

The demo runs as a subprocess in a fresh working directory with every
``DPGATE_*`` variable unset, so it starts the embedded Postgres with its data in
``./dpgate-postgres`` there (API.md: "embedded database ... No other set-up").
The keys and the three ``curl`` commands are parsed from what it prints and run as printed (with
``curl`` when installed, else with httpx on the same URL and header).
"""

from __future__ import annotations

import json
import math
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from research.capmetrics import default_capmetrics_path
from tests.live_server import free_port

pytestmark = pytest.mark.slow


@dataclass
class Demo:
    process: subprocess.Popen
    lines: list[str]
    url: str
    output: queue.Queue[str | None]

    def interrupt(self, signum: int = signal.SIGINT) -> tuple[int, list[str]]:
        """Send ``signum`` to the demo (as Ctrl-C does); its exit code and last lines."""
        self.process.send_signal(signum)
        code = self.process.wait(timeout=30)
        rest = []
        while (line := self.output.get(timeout=10)) is not None:
            rest.append(line)
        return code, rest

    def value(self, prefix: str) -> str:
        return next(line.split(":", 1)[1].strip() for line in self.lines if line.startswith(prefix))

    @property
    def curls(self) -> list[str]:
        return [line for line in self.lines if line.startswith("curl ")]

    def stop(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)


def _command() -> list[str]:
    exe = Path(sys.executable).parent / "dpgate"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli"]


def start_demo(workdir: Path, *extra: str, timeout: float = 120) -> Demo:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPGATE_")}
    proc = subprocess.Popen(
        [*_command(), "demo", "--port", str(port), *extra],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    out: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line.rstrip("\n"))
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    demo = Demo(proc, [], f"http://127.0.0.1:{port}", out)
    deadline = time.monotonic() + timeout
    try:
        while not any(line.startswith("API docs:") for line in demo.lines):
            line = out.get(timeout=max(deadline - time.monotonic(), 0.1))
            if line is None:
                raise RuntimeError("demo exited early:\n" + "\n".join(demo.lines))
            demo.lines.append(line)
        while time.monotonic() < deadline:
            with suppress(httpx.HTTPError):
                if httpx.get(f"{demo.url}/healthz", timeout=1).status_code == 200:
                    return demo
            if proc.poll() is not None:
                raise RuntimeError("demo server exited:\n" + "\n".join(demo.lines))
            time.sleep(0.2)
        raise RuntimeError("demo server did not answer /healthz")
    except BaseException:
        demo.stop()
        raise


def run_curl(command: str) -> tuple[int, dict]:
    """Run a printed curl command as printed; return (HTTP status, JSON body)."""
    tokens = shlex.split(command)
    assert tokens[0] == "curl"
    if shutil.which("curl"):
        res = subprocess.run(
            [*tokens, "-w", "\n%{http_code}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        body, _, status = res.stdout.rpartition("\n")
        return int(status), json.loads(body)
    header = tokens[tokens.index("-H") + 1]
    name, _, value = header.partition(":")
    url = next(t for t in tokens[1:] if t.startswith("http"))
    r = httpx.get(url, headers={name.strip(): value.strip()}, timeout=60)
    return r.status_code, r.json()


def _check_first_run(demo: Demo) -> None:
    admin, analyst = demo.value("admin key"), demo.value("analyst key")
    assert admin.startswith("dpg_") and analyst.startswith("dpg_") and admin != analyst
    curls = demo.curls
    assert len(curls) == 3 and all(f"Bearer {analyst}" in c for c in curls)
    assert all(demo.url in c for c in curls)

    status, grids = run_curl(curls[0])
    assert status == 200
    assert 1 <= len(grids["grids"]) <= 5
    assert {"grid_id", "h3_cell", "slot_start", "n_users", "n_records"} <= set(grids["grids"][0])

    status, mean = run_curl(curls[1])
    assert status == 200, mean
    assert mean["statistic"] == "mean" and mean["epsilon"] == 1
    assert math.isfinite(mean["estimate"]) and mean["n_users"] >= 10
    assert mean["noise_scale"] > 0 and mean["cached"] is False
    if mean["ci95"] is None:
        assert mean["ci95_note"]
    else:
        lo, hi = mean["ci95"]
        assert lo <= mean["estimate"] <= hi

    status, budget = run_curl(curls[2])
    assert status == 200
    assert budget["budget_per_user"] == 10 and budget["max_spent"] == pytest.approx(1.0)

    # The admin key is an admin key; the analyst key is not.
    r = httpx.get(f"{demo.url}/datasets", headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 200 and len(r.json()["datasets"]) == 1
    r = httpx.post(
        f"{demo.url}/keys",
        json={"name": "x", "role": "analyst", "epsilon_quota": None},
        headers={"Authorization": f"Bearer {analyst}"},
    )
    assert r.status_code == 403


def test_demo_prints_working_keys_and_curl_commands_and_runs_twice(tmp_path):
    first = start_demo(tmp_path)
    try:
        assert "loaded now:" in first.lines[0]
        _check_first_run(first)
    finally:
        first.stop()
    assert (tmp_path / "dpgate-postgres" / "PG_VERSION").is_file()  # the embedded database

    second = start_demo(tmp_path)  # same directory: reuses the dataset cleanly
    try:
        assert "reused from an earlier run" in second.lines[0]
        assert second.value("analyst key") != first.value("analyst key")
        status, mean = run_curl(second.curls[1])
        assert status == 200 and mean["cached"] is True  # same query, same epoch: free
        status, budget = run_curl(second.curls[2])
        assert status == 200 and budget["max_spent"] == pytest.approx(1.0)
        admin = {"Authorization": f"Bearer {second.value('admin key')}"}
        r = httpx.get(f"{second.url}/datasets", headers=admin)
        assert len(r.json()["datasets"]) == 1  # no second copy of the demo data
        # the first run's keys are revoked, not piled up
        old = {"Authorization": f"Bearer {first.value('analyst key')}"}
        assert httpx.get(f"{second.url}/keys/me", headers=old).status_code == 401
        active = [k for k in httpx.get(f"{second.url}/keys", headers=admin).json()["keys"]
                  if not k["revoked"]]  # fmt: skip
        assert sorted(k["name"] for k in active) == ["demo admin", "demo analyst"]
        code, rest = second.interrupt()  # Ctrl-C: the server stops quietly
        assert code == 0 and not any("Traceback" in line for line in rest), rest
    finally:
        second.stop()


def test_demo_with_capmetrics_day(tmp_path):
    path = default_capmetrics_path()
    if path is None:
        pytest.skip("CapMetrics data not found at ../shared/data/capmetrics (docs/math.md §8)")
    demo = start_demo(tmp_path, "--data", str(path))
    try:
        assert "CapMetrics" in demo.lines[0]
        status, mean = run_curl(demo.curls[1])
        assert status == 200, mean
        assert math.isfinite(mean["estimate"]) and mean["noise_scale"] > 0
        r = httpx.get(
            f"{demo.url}/datasets",
            headers={"Authorization": f"Bearer {demo.value('admin key')}"},
        )
        ds = r.json()["datasets"][0]
        assert ds["value_bound"] == 30 and ds["timezone"] == "America/Chicago"
    finally:
        demo.stop()
