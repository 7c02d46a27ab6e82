"""The vectorised Monte-Carlo gives exactly the core's releases (same draws, same outputs)."""

from __future__ import annotations

import numpy as np
import pytest

from app.core import plan_mean, release_mean
from app.core.data.grid import GridData
from app.core.mechanisms.interval import interval_costs, quantile_candidates, quantile_scores
from research.noise import SeededNoise, noisy_max_many
from research.paper003 import _row_quantiles, akmv_level, akmv_release, wco_noiseless
from research.simulate import (
    bestfit_array_means,
    deterministic_release,
    levy_estimates,
    levy_picks,
    projected_means,
    quantile_estimates,
    quantile_picks,
    simulate_abs_errors,
    wraparound_array_means,
)
from research.workloads import geometric_collection, itms_grid, uniform_values

U = 65.0


class Scripted:
    """A noise source that replays given choices and standard Laplace draws, and records
    the scores and budgets of the choices it is asked for."""

    def __init__(self, picks, laplaces) -> None:
        self.picks = list(picks)
        self.z = list(laplaces)
        self.asked: list[tuple[np.ndarray, float, int]] = []

    def laplace(self, value: float, scale: float) -> float:
        return value + scale * self.z.pop(0)

    def noisy_max(self, scores, epsilon: float, *, sensitivity: int = 1) -> int:
        self.asked.append((np.asarray(scores), epsilon, sensitivity))
        return int(self.picks.pop(0))


@pytest.fixture(scope="module")
def grid():
    return itms_grid(np.random.default_rng(11))


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_levy_matches_core_release(grid, eps):
    rng = np.random.default_rng(1)
    d = plan_mean(grid.counts, U, eps, "levy").details
    means = bestfit_array_means(grid, int(d["m_ub"]))
    tau = float(d["tau"])
    picks, z = levy_picks(means, U, tau, eps, rng, 25), rng.laplace(size=25)
    vec = levy_estimates(means, U, tau, eps, picks, z)
    _, cost = interval_costs(means, U, tau)
    core = []
    for i in range(25):
        src = Scripted([picks[i]], [z[i]])
        core.append(release_mean(grid, U, eps, "levy", noise=src).estimate)
        ((scores, e, sens),) = src.asked
        assert np.array_equal(scores, -cost) and e == eps / 2 and sens == 1
    np.testing.assert_allclose(vec, core, rtol=0, atol=1e-9)
    assert np.all((vec >= 0) & (vec <= U))


@pytest.mark.parametrize("variant", ["fixed", "optimized"])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_quantile_matches_core_release(grid, variant, eps):
    rng = np.random.default_rng(2)
    mech = f"quantile_{variant}"
    d = plan_mean(grid.counts, U, eps, mech).details
    means = bestfit_array_means(grid, int(d["m_ub"]))
    qs = (float(d["q_lo"]), float(d["q_hi"]))
    a, b = (quantile_picks(means, q, U, eps / 4, rng, 25) for q in qs)
    z = rng.laplace(size=25)
    vec = quantile_estimates(means, U, eps, (a, b), z)
    core = []
    for i in range(25):
        src = Scripted([a[i], b[i]], [z[i]])
        core.append(release_mean(grid, U, eps, mech, noise=src).estimate)
        for (scores, e, sens), q in zip(src.asked, qs, strict=True):
            assert np.array_equal(scores, quantile_scores(means, q, quantile_candidates(U)))
            assert e == eps / 4 and sens == 1
    np.testing.assert_allclose(vec, core, rtol=0, atol=1e-9)


@pytest.mark.parametrize("fill", [True, False])
def test_wraparound_array_means_average_to_the_core_estimate(grid, fill):
    value, _, _, d = deterministic_release(grid, U, 1.0, "array_avg_wrap", user_mean_fill=fill)
    means = wraparound_array_means(grid, int(d["m_ub"]), fill)
    assert means.size == d["K"]
    assert means.mean() == pytest.approx(value, abs=1e-9)
    assert means.min() >= 0.0 and means.max() <= U


def test_noisy_max_many_and_projection_helpers():
    rng = np.random.default_rng(3)
    scores = np.array([0, -1, -9, 2, 2])
    picks = noisy_max_many(rng, scores, 1e9, 200)  # a huge budget: always a top score
    assert set(picks.tolist()) <= {3, 4} and len(set(picks.tolist())) == 2
    first = noisy_max_many(np.random.default_rng(7), scores, 0.5, 50)
    assert np.array_equal(first, noisy_max_many(np.random.default_rng(7), scores, 0.5, 50))
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
    hi = U * counts.max()
    t_vec = _row_quantiles(sums, q, hi, eps / 2, np.random.default_rng(8))
    cands = quantile_candidates(hi)
    for r in range(6):
        g = GridData.from_counts_and_values(counts, x[r])
        pick = int(np.searchsorted(cands, t_vec[r]))
        assert cands[pick] == t_vec[r]
        src = Scripted([pick], [0.0])
        rel = akmv_release(g, U, eps, src)
        ((scores, e, _),) = src.asked
        assert np.array_equal(scores, quantile_scores(g.head_sums(counts), q, cands))
        assert e == eps / 2
        assert rel.details["T"] == t_vec[r]
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
