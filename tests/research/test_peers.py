"""The peers comparison: each library's release behaves as documented, the table is fair."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.data.grid import GridData
from app.synth.itms import itms_counts
from research import peers as peers_mod
from research.peer_libraries import (
    hindsight_k,
    k_candidates,
    opendp_scale,
    peer_available,
    peer_estimates,
    truncate_earliest,
    truncation_mae,
)
from research.peers import run_peers

U = 65.0


@pytest.fixture(scope="module")
def small_grid():
    rng = np.random.default_rng(0)
    counts = np.array([12, 9, 7, 5, 5, 4, 3, 3, 2, 2, 2, 1, 1, 1, 1] * 4)
    return GridData.from_counts_and_values(counts, rng.uniform(20, 40, int(counts.sum())))


def _need(name: str) -> None:
    if peer_available(name) is None:
        pytest.skip(f"{name} is not installed (pip install '.[peers]')")


def test_k_candidates_and_truncation(small_grid):
    ks = k_candidates(itms_counts())
    assert ks[0] == 1 and ks[-1] == 417 and 46 in ks and ks == sorted(set(ks))
    x = truncate_earliest(small_grid, 3)
    assert x.size == int(np.minimum(small_grid.counts, 3).sum())
    # The earliest records of each user, in order.
    assert np.array_equal(x[:3], small_grid.values[:3])
    assert np.array_equal(x[3:6], small_grid.values[12:15])


def _expected_clip_mae(grid: GridData, k: int, eps: float) -> float:
    """E|c + Lap(b)| = |c| + b exp(-|c|/b) for the cap-at-k mean plus Lap(kU/(s eps))."""
    x = truncate_earliest(grid, k)
    c = abs(x.mean() - grid.values.mean())
    b = k * U / (x.size * eps)
    return c + b * math.exp(-c / b)


@pytest.mark.parametrize("peer", ["opendp", "diffprivlib"])
def test_truncating_peers_add_laplace_of_scale_k_u_over_s_eps(small_grid, peer):
    _need(peer)
    est = peer_estimates(peer, small_grid, U, 1.0, 3, 3000, seed=1)
    mae = np.abs(est - small_grid.values.mean()).mean()
    assert mae == pytest.approx(_expected_clip_mae(small_grid, 3, 1.0), rel=0.08)


def test_diffprivlib_is_seeded(small_grid):
    _need("diffprivlib")
    a = peer_estimates("diffprivlib", small_grid, U, 1.0, 2, 5, seed=3)
    b = peer_estimates("diffprivlib", small_grid, U, 1.0, 2, 5, seed=3)
    assert np.array_equal(a, b)


def test_pipeline_dp_mean_is_plausible(small_grid):
    _need("pipeline_dp")
    est = peer_estimates("pipeline_dp", small_grid, U, 2.0, 3, 60, seed=0)
    assert np.all(np.isfinite(est))
    # Count and sum noise at eps/2 each: noisier than the truncating peers, same centre.
    assert abs(np.median(est) - small_grid.values.mean()) < 3.0


def test_run_peers_table_and_missing_peer(monkeypatch, tmp_path):
    _need("opendp")
    real = peer_available
    monkeypatch.setattr(
        peers_mod, "peer_available", lambda n: None if n == "diffprivlib" else real(n)
    )
    r = run_peers(
        tmp_path,
        runs=20,
        eps_list=(1.0,),
        peers=("opendp", "diffprivlib"),
        progress=False,
        workers=1,
    )
    assert "diffprivlib: **not installed — skipped**" in r.markdown
    systems = {row.system for row in r.data["rows"]}
    assert systems == {"dpgate", "OpenDP"}
    roles = [row.extra.get("role") for row in r.data["rows"] if row.system == "dpgate"]
    assert roles.count("auto") == roles.count("hindsight") >= 1
    ratios = r.data["ratios"]
    assert all(a > 0 and h > 0 for a, h in ratios.values())
    assert any(k.startswith("dpgate auto MAE") for k in r.checks)
    assert "| ITMS-like grid (002 §IV) | 1 |" in r.markdown


def test_exact_truncation_mae_and_opendp_scale(small_grid):
    _need("opendp")
    s = int(np.minimum(small_grid.counts, 3).sum())
    scale = opendp_scale(s, U, 1.0, 3)
    assert scale == pytest.approx(3 * U / s, rel=1e-6)  # OpenDP's sized mean: kU/(s eps)
    assert truncation_mae(small_grid, 3, scale) == pytest.approx(
        _expected_clip_mae(small_grid, 3, 1.0), rel=1e-6
    )
    k = hindsight_k("opendp", small_grid, U, 1.0)
    assert k in k_candidates(small_grid.counts)
    assert k == hindsight_k("analytic", small_grid, U, 1.0)


def test_run_peers_with_all_three_libraries_on_a_small_grid(small_grid, tmp_path):
    for name in ("opendp", "diffprivlib", "pipeline_dp"):
        _need(name)
    r = run_peers(
        tmp_path, runs=30, eps_list=(2.0,), progress=False, workers=2,
        grids=[("ITMS-like test grid", small_grid, U)],
    )  # fmt: skip
    rows = r.data["rows"]
    assert {row.system for row in rows} == {"dpgate", "OpenDP", "PipelineDP", "diffprivlib"}
    for lib in ("OpenDP", "PipelineDP", "diffprivlib"):
        labels = sorted(row.extra["label"] for row in rows if row.system == lib)
        assert labels == ["hindsight", "median"]
    for row in rows:
        assert np.isfinite(row.mae) and row.mae >= 0
    ((ra, rh),) = r.data["ratios"].values()
    assert ra > 0 and rh > 0
    assert "Reading the ITMS-like rows" in r.markdown
