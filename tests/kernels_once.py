"""On a fresh checkout numba's on-disk cache is empty, and every process that starts the
app (each xdist worker, each server or CLI subprocess) compiles the kernels itself:
11-12 s of CPU each. With xdist, the controlling process therefore compiles them once,
in a subprocess, while the workers collect; each worker waits for it (a lock the
subprocess holds) before its first test, then loads the kernels from the cache."""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_LOCK = Path(tempfile.gettempdir()) / (
    "dpgate-tests-kernels-" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:12] + ".lock"
)
_COMPILE = "from app.main import load_compiled_kernels; load_compiled_kernels()"


def caches_missing() -> bool:
    """Whether a module with cached kernels has no cache index yet (numba's default place)."""
    for source in (ROOT / "app").rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        cached = (source.parent / "__pycache__").glob(f"{source.stem}.*.nbi")
        if "numba" in text and "cache=True" in text and not any(cached):
            return True
    return False


def start(config: pytest.Config) -> None:
    """In xdist's controlling process, with caches missing: compile in a subprocess that
    holds the lock until it exits."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    if not caches_missing():
        return
    with _LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        config.stash[_PROC] = subprocess.Popen(
            [sys.executable, "-c", _COMPILE],
            cwd=ROOT,
            pass_fds=(lock.fileno(),),  # the lock lives as long as the subprocess
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def finish(config: pytest.Config) -> None:
    proc = config.stash.get(_PROC, None)
    if proc is not None:
        proc.wait(timeout=600)


def wait_for_them(timeout: float = 300) -> None:
    """In a worker: wait while a compile subprocess holds the lock (none: at once). On
    timeout the worker goes on and compiles what it needs itself, as without this."""
    with _LOCK.open("a") as lock:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
                continue
            fcntl.flock(lock, fcntl.LOCK_UN)
            return


_PROC = pytest.StashKey[subprocess.Popen]()
