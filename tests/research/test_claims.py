"""docs/math.md §7.4's qualitative claims hold in the experiments' tables (fixed seeds, few runs).

The full runs behind ``docs/results.md`` use 10^4 runs per point; here every
experiment runs with 1,500 runs (seed 0), and each claim has a wide margin at that
size (see the tables in ``docs/results.md``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from research import clip_user_figures as cuf
from research.capmetrics import default_capmetrics_path, run_capmetrics
from research.paper002 import run_bestfit, run_mae, run_scaling, run_staircase
from research.paper003 import run_bounding

RUNS = 1500


def test_002_fig1_bestfit_beats_wraparound_for_levy_and_quantile(tmp_path):
    r = run_bestfit(tmp_path, runs=RUNS, seed=0, progress=False)
    assert all(r.checks.values()), r.checks
    curves = r.data["curves"]
    i = [p.eps for p in curves["levy"]].index(1.0)
    # The headline example, with an explicit margin: bestfit's MAE for levy at
    # eps = 1 is below 0.75 x wraparound's.
    assert curves["levy"][i].mae < 0.75 * curves["levy@wrap"][i].mae
    assert (tmp_path / "002_fig1_bestfit_vs_wraparound.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_002_fig2_every_clipping_mechanism_beats_baseline(tmp_path):
    r = run_mae(tmp_path, runs=RUNS, seed=0, progress=False)
    assert all(r.checks.values()), r.checks
    c = r.data["curves"]
    for m in ("array_avg_bestfit", "levy", "quantile_fixed", "quantile_optimized"):
        for p, b in zip(c[m], c["baseline"], strict=True):
            assert p.mae < 0.6 * b.mae, (m, p.eps)


def test_002_figs3_4_levy_wins_sample_scaling_fixed_quantile_wins_user_scaling(tmp_path):
    r = run_scaling(tmp_path, runs=RUNS, seed=0, progress=False)
    assert all(r.checks.values()), r.checks
    user = r.data["user"]
    for i in range(len(user["baseline"])):
        others = min(user[m][i].mae for m in ("array_avg_bestfit", "levy", "quantile_optimized"))
        assert user["quantile_fixed"][i].mae < 0.7 * others


def test_002_fig5_staircase_non_decreasing(tmp_path):
    r = run_staircase(tmp_path, progress=False, points=200)
    assert r.checks == {"m^(ε) is non-decreasing in ε": True}
    ms = r.data["m"]
    assert ms[0] < ms[-1] == 417 and len(np.unique(ms)) > 20


def test_003_worst_case_optimal_beats_laplace_and_akmv(tmp_path):
    r = run_bounding(tmp_path, runs=RUNS, seed=0, progress=False)
    assert all(r.checks.values()), r.checks
    for key in ("geometric", "extreme"):
        mae = r.data[key]
        # Strictly better by a factor >= 1.5 wherever ceil(2/eps) > 1 (eps < 2).
        for i in range(len(mae["laplace"]) - 1):
            best_other = min(mae["laplace"][i], mae["akmv"][i])
            assert mae["worst_case_optimal"][i] < best_other / 1.5, (key, i)


def test_004_k_eps_below_g1_eps_and_falls_with_gamma():
    # 3 draws instead of 004's 10 (the full run uses 10).
    rows = cuf.simulate(draws=3, eps_grid=(0.1, 0.4, 1.0), seed=0, progress=False)
    assert cuf.claims(rows) == {
        "Kε <= G₁ε/2 at every (γ, ε)": True,
        "mean K falls as γ grows": True,
    }
    by = {}
    for row in rows:
        by.setdefault(row.gamma, []).append(row)
    for lo, hi in itertools.pairwise(sorted(by)):
        assert sum(r.mean_k for r in by[hi]) <= sum(r.mean_k for r in by[lo])
    assert sum(r.mean_k for r in by[9.0]) < sum(r.mean_k for r in by[3.0])


def test_004_capmetrics(tmp_path):
    path = default_capmetrics_path()
    if path is None:
        pytest.skip("CapMetrics data not found at ../shared/data/capmetrics (docs/math.md §8)")
    r = run_capmetrics(tmp_path, data=path, progress=False, eps_list=(0.1, 1.0, 2.0))
    assert all(r.checks.values()), r.checks
    rows = r.data["rows"]
    assert len({row.slot for row in rows}) >= 20
    assert np.mean([row.K / row.G1 for row in rows]) < 0.9


def test_centred_clip_beats_every_other_dpgate_mechanism_on_the_itms_grid():
    """Issue 7: on the ITMS-like grid at eps = 1 centred_clip's MAE is below that of the
    best other dpgate mean mechanism (quantile_fixed, ~0.40 in docs/figures/peers.md), by a
    wide margin (it measures ~0.05 there)."""
    from app.core import MEAN_MECHANISMS
    from app.synth.itms import ITMS_U
    from research.common import seed_for
    from research.noise import SeededNoise
    from research.paper002 import itms_dataset
    from research.simulate import simulate_abs_errors

    grid, runs = itms_dataset(0), 400
    mae = {}
    for mech in MEAN_MECHANISMS:
        if mech == "auto":
            continue
        noise = SeededNoise(np.random.default_rng(seed_for(0, "claims", mech)))
        mae[mech] = float(simulate_abs_errors(grid, ITMS_U, 1.0, mech, runs, noise)[0].mean())
    ours = mae.pop("centred_clip")
    assert ours < 0.5 * min(mae.values()), (ours, min(mae, key=mae.get))
