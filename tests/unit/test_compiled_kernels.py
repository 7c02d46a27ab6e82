"""Start-up loads every compiled (numba) kernel a request uses, with the argument types
requests pass: in a fresh process, after ``app.main.load_compiled_kernels`` (what
start-up runs), the CSV and feed readers and Clip-User run and no kernel of ``app``
gains a compiled signature (a kernel the loader missed, or loaded for other argument
types, would: a compile costs 11–12 s on a fresh install, paid by a request)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, pkgutil, random
import numpy as np
from numba.core.registry import CPUDispatcher
import app
from app.main import load_compiled_kernels
load_compiled_kernels()
kernels = {}
for info in pkgutil.walk_packages(app.__path__, "app."):
    with open(importlib.util.find_spec(info.name).origin) as source:
        if "numba" not in source.read():
            continue
    for value in vars(importlib.import_module(info.name)).values():
        if isinstance(value, CPUDispatcher) and value.__module__ == info.name:
            kernels[value] = len(value.signatures)  # 0: called only by other kernels
from app.core.planning.clip_user import clip_user_suppressed
from tests.unit.ingest import test_csv_fast, test_gtfs_fast
test_csv_fast.test_plain_runs_equal_the_usual_path_on_a_large_clean_file()
test_gtfs_fast.test_plain_feeds_are_read_in_one_scan()
rng = np.random.default_rng(0)
grids = np.repeat(np.arange(50), 20)
users = np.concatenate([rng.choice(200, 20, replace=False) for _ in range(50)])
kept = clip_user_suppressed(grids, users, rng.integers(1, 9, grids.size), 30.0, 0.5).kept()
compiled_now = [k.__name__ for k, n in kernels.items() if len(k.signatures) != n]
print(len(kernels), sum(n > 0 for n in kernels.values()), int((kept == 0).sum()), *compiled_now)
"""


def test_start_up_loads_every_compiled_kernel_a_request_uses() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    kernels, loaded, removed, *compiled_by_a_request = out.stdout.split()
    assert int(kernels) >= 15 and int(loaded) >= 5  # CSV, feed, H3, Clip-User, occupancy
    assert int(removed) > 0  # Clip-User's compiled stages ran and removed users
    assert compiled_by_a_request == []
