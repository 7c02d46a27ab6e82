"""``benchmarks/accuracy.py`` runs on the engine as it is: a small evaluation end to end.

The benchmark is where the accuracy claims of docs/results.md come from, so it must
keep working when the engine's answers change shape (``ci95`` null for mechanisms
without an honest interval, answers projected onto their range).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np

from app.core import GridData
from research.noise import SeededNoise

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy.py"


def _bench():
    spec = importlib.util.spec_from_file_location("accuracy_benchmark", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _grid(rng: np.random.Generator) -> tuple[GridData, float]:
    users = [list(rng.uniform(0, 12, size=int(rng.integers(1, 12)))) for _ in range(40)]
    grid = GridData.from_user_values(users)
    return grid, float(np.mean(np.concatenate(users)))


def test_evaluate_and_summarise_every_system() -> None:
    bench = _bench()
    rng = np.random.default_rng(3)
    sets = {"small": [(_grid(rng)[0], 30.0) for _ in range(2)]}
    mechs = {"mean": ("auto", "clip"), "variance": ()}
    rows = bench.evaluate(sets, mechs, 20, 20, False)
    by_system = {(r["system"], r["eps"]) for r in rows if r["stat"] == "mean"}
    for eps in bench.EPS:
        assert {("auto", eps), ("clip", eps), ("peer k=median", eps)} <= by_system
    for r in rows:
        assert math.isfinite(r["mae"]) and r["mae"] >= 0
        if r["system"] in ("clip", "auto"):  # honest intervals: coverage is counted
            assert 0.0 <= r["cover"] <= 1.0
    summary = bench.summarise(rows, {"small": ("small",)})
    assert summary and "auto" in bench.table(summary)


def test_dpgate_runs_count_coverage_only_where_an_interval_is_published() -> None:
    bench = _bench()
    grid, truth = _grid(np.random.default_rng(5))
    noise = SeededNoise(np.random.default_rng(0))
    mae, cover = bench._dpgate_runs("mean", grid, 30.0, 1.0, "baseline", truth, noise, 50)
    assert mae > 0 and 0.8 <= cover <= 1.0  # baseline's interval holds the truth
    mae, cover = bench._dpgate_runs("mean", grid, 30.0, 1.0, "auto", truth, noise, 50)
    assert mae > 0 and 0.8 <= cover <= 1.0  # auto's mean here: user_window's interval
    # the window variance's interval (its clipped-user bound) holds the truth too
    var = float(np.var(grid.values))
    mae, cover = bench._dpgate_runs("variance", grid, 30.0, 1.0, "window", var, noise, 50)
    assert mae > 0 and 0.8 <= cover <= 1.0
    # the centred variance's too (its clipped-user bound, docs/math.md §11.6)
    mae, cover = bench._dpgate_runs("variance", grid, 30.0, 1.0, "centred", var, noise, 50)
    assert mae > 0 and 0.8 <= cover <= 1.0
    # levy publishes none: no coverage is counted
    mae, cover = bench._dpgate_runs("mean", grid, 30.0, 1.0, "levy", truth, noise, 50)
    assert mae > 0 and math.isnan(cover)
