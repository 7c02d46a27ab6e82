"""The vectorised Monte-Carlo gives exactly the core's releases (same draws, same outputs)."""

from __future__ import annotations

import numpy as np
import pytest

from app.core import plan_mean, release_mean
from app.core.grid import GridData
from app.core.noise import choose_index
from app.synth.bounding import geometric_collection, uniform_values
from app.synth.itms import itms_grid
from research.noise import SeededNoise
from research.paper003 import _row_quantiles, akmv_level, akmv_release, wco_noiseless
from research.simulate import (
    bestfit_array_means,
    choose_many,
    deterministic_release,
    levy_estimates,
    projected_means,
    quantile_estimates,
    simulate_abs_errors,
    wraparound_array_means,
)

U = 65.0


class Scripted:
    """A noise source that replays given uniforms and standard Laplace draws."""

    def __init__(self, uniforms, laplaces) -> None:
        self.u = list(uniforms)
        self.z = list(laplaces)

    def laplace(self, value: float, scale: float) -> float:
        return value + scale * self.z.pop(0)

    def uniform(self) -> float:
        return self.u.pop(0)

    def exponential_choice(self, log_weights) -> int:
        return choose_index(log_weights, self.u.pop(0))


@pytest.fixture(scope="module")
def grid():
    return itms_grid(np.random.default_rng(11))


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_levy_matches_core_release(grid, eps):
    rng = np.random.default_rng(1)
    u, z = rng.random(25), rng.laplace(size=25)
    d = plan_mean(grid.counts, U, eps, "levy").details
    means = bestfit_array_means(grid, int(d["m_ub"]))
    vec = levy_estimates(means, U, float(d["tau"]), eps, u, z)
    core = [
        release_mean(grid, U, eps, "levy", noise=Scripted([u[i]], [z[i]])).estimate
        for i in range(25)
    ]
    np.testing.assert_allclose(vec, core, rtol=0, atol=1e-9)


@pytest.mark.parametrize("variant", ["fixed", "optimized"])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_quantile_matches_core_release(grid, variant, eps):
    rng = np.random.default_rng(2)
    us = tuple(rng.random(25) for _ in range(4))
    z = rng.laplace(size=25)
    mech = f"quantile_{variant}"
    d = plan_mean(grid.counts, U, eps, mech).details
    means = bestfit_array_means(grid, int(d["m_ub"]))
    vec = quantile_estimates(means, U, float(d["q_lo"]), float(d["q_hi"]), eps, us, z)
    core = [
        release_mean(
            grid, U, eps, mech, noise=Scripted([us[0][i], us[1][i], us[2][i], us[3][i]], [z[i]])
        ).estimate
        for i in range(25)
    ]
    np.testing.assert_allclose(vec, core, rtol=0, atol=1e-9)


@pytest.mark.parametrize("fill", [True, False])
def test_wraparound_array_means_average_to_the_core_estimate(grid, fill):
    value, _, _, d = deterministic_release(grid, U, 1.0, "array_avg_wrap", user_mean_fill=fill)
    means = wraparound_array_means(grid, int(d["m_ub"]), fill)
    assert means.size == d["K"]
    assert means.mean() == pytest.approx(value, abs=1e-9)
    assert means.min() >= 0.0 and means.max() <= U


def test_choose_many_and_projection_helpers():
    rng = np.random.default_rng(3)
    lw = np.log(rng.random(9))
    lw[4] = -np.inf
    u = rng.random(500)
    assert choose_many(lw, u).tolist() == [choose_index(lw, x) for x in u]
    m = rng.uniform(0, U, 50)
    lo, hi = rng.uniform(0, 30, 20), rng.uniform(30, U, 20)
    want = [np.clip(m, a, b).mean() for a, b in zip(lo, hi, strict=True)]
    np.testing.assert_allclose(projected_means(m, lo, hi), want, atol=1e-9)


def test_linear_mechanisms_get_their_laplace_scale(grid):
    noise = SeededNoise(np.random.default_rng(4))
    err, ran = simulate_abs_errors(grid, U, 1.0, "baseline", 40_000, noise)
    assert ran == "baseline"
    # E|Lap(b)| = b = U m*/(n ε) (002 §IV-A uses exactly this for BASELINE).
    assert err.mean() == pytest.approx(U * 417 / 17166, rel=0.02)
    _, ran = simulate_abs_errors(grid, U, 1.0, "auto", 10, noise)
    assert ran == plan_mean(grid.counts, U, 1.0, "auto").mechanism
    with pytest.raises(ValueError, match="unknown"):
        simulate_abs_errors(grid, U, 1.0, "nope", 10, noise)


def test_akmv_rows_match_core_quantile():
    counts = geometric_collection(4)
    rng = np.random.default_rng(5)
    x = uniform_values(rng, (6, int(counts.sum())))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sums = np.add.reduceat(x, starts, axis=1)
    eps = 0.4
    q = akmv_level(counts.size, eps)
    u1, u2 = rng.random(6), rng.random(6)
    t_vec = _row_quantiles(sums, q, U * counts.max(), eps / 2, u1, u2)
    for r in range(6):
        g = GridData.from_counts_and_values(counts, x[r])
        rel = akmv_release(g, U, eps, Scripted([u1[r], u2[r]], [0.0]))
        assert rel.details["T"] == pytest.approx(t_vec[r], abs=1e-9)
        assert rel.estimate == pytest.approx(np.minimum(sums[r], t_vec[r]).sum() / counts.sum())


@pytest.mark.parametrize("eps", [0.1, 0.3, 1.0, 2.0])
def test_wco_rows_match_core_release(eps):
    counts = geometric_collection(5)
    rng = np.random.default_rng(6)
    x = uniform_values(rng, (4, int(counts.sum())))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    vec = wco_noiseless(np.add.reduceat(x, starts, axis=1), counts, U, eps)
    for r in range(4):
        g = GridData.from_counts_and_values(counts, x[r])
        value, _, name, _ = deterministic_release(g, U, eps, "worst_case_optimal")
        assert name == "worst_case_optimal"
        assert value == pytest.approx(vec[r], abs=1e-9)
