"""Statistical checks with fixed seeds and stated significance levels α.

A test "fails" only if a hypothesis that holds when the code is right is rejected
at level α; with the seeds fixed the outcomes are deterministic, except for the
OpenDP test, whose CSPRNG cannot be seeded (its α = 1e-6 is its false-alarm rate).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from app.core import GridData, release_mean, release_variance
from app.core.interval import private_interval, private_quantile
from research.noise import SeededNoise
from tests.unit.core.helpers import ZeroNoise

U = 65.0
ALPHA = 1e-3


def _grid(seed: int = 0) -> GridData:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 60, size=40)
    values = np.clip(rng.normal(20.7, 10.7, size=int(counts.sum())), 0, U)
    return GridData.from_counts_and_values(counts, values)


@pytest.mark.parametrize(
    ("statistic", "mechanism"),
    [("mean", "baseline"), ("mean", "clip"), ("mean", "opt_array"),
     ("mean", "worst_case_optimal"), ("variance", "clip")],
)
def test_noise_is_laplace_with_the_reported_scale(statistic: str, mechanism: str) -> None:
    """KS test of (estimate - noiseless)/scale against Lap(1), α = 1e-3, seed fixed."""
    grid = _grid()
    release = release_mean if statistic == "mean" else release_variance
    truth = release(grid, U, 0.7, mechanism, noise=ZeroNoise()).estimate
    noise = SeededNoise(np.random.default_rng(42))
    draws = [release(grid, U, 0.7, mechanism, noise=noise) for _ in range(3000)]
    z = np.array([(r.estimate - truth) / r.noise_scale for r in draws])
    assert stats.kstest(z, stats.laplace.cdf).pvalue > ALPHA


def test_opendp_noise_is_laplace_with_the_reported_scale() -> None:
    """Same KS test on the release path's OpenDP sampler (unseedable CSPRNG), α = 1e-6."""
    grid = _grid(1)
    truth = release_mean(grid, U, 1.3, "clip", noise=ZeroNoise()).estimate
    draws = [release_mean(grid, U, 1.3, "clip") for _ in range(3000)]
    z = np.array([(r.estimate - truth) / r.noise_scale for r in draws])
    assert stats.kstest(z, stats.laplace.cdf).pvalue > 1e-6


@pytest.mark.parametrize("mechanism", ["baseline", "clip", "array_avg_bestfit", "levy"])
def test_ci95_covers_the_noiseless_estimate_at_95_percent(mechanism: str) -> None:
    """Coverage of estimate ± b ln 20 is Binomial(N, 0.95): two-sided binomial test, α = 1e-3.

    For levy the noiseless value is the projected mean given the interval drawn in the
    same run (the interval's randomness is shared through the seeded source).
    """
    grid = _grid(2)
    n_runs = 2000
    covered = 0
    for i in range(n_runs):
        plain = release_mean(grid, U, 0.5, mechanism, noise=ZeroNoise(seed=i))
        rng = np.random.default_rng(i)
        noisy = release_mean(grid, U, 0.5, mechanism, noise=_SharedDraws(rng, seed=i))
        lo, hi = noisy.ci95
        covered += lo <= plain.estimate <= hi
    assert stats.binomtest(covered, n_runs, 0.95).pvalue > ALPHA


class _SharedDraws(ZeroNoise):
    """Same interval draws as ``ZeroNoise(seed)``, plus Laplace noise from ``rng``."""

    def __init__(self, rng: np.random.Generator, seed: int) -> None:
        super().__init__(seed)
        self.lap = rng

    def laplace(self, value: float, scale: float) -> float:
        return float(value + self.lap.laplace(0.0, scale)) if scale > 0 else float(value)


def _smith_gap_probabilities(values: np.ndarray, q: float, eps: float) -> np.ndarray:
    """Smith's mechanism written out independently: P(gap i) ∝ width_i · e^{-ε|i - qk|/2}."""
    z = [0.0, *sorted(min(max(v, 0.0), U) for v in values), U]
    k = len(values)
    w = [(z[i + 1] - z[i]) * math.exp(-eps * abs(i - q * k) / 2) for i in range(k + 1)]
    return np.array(w) / sum(w)


def test_private_quantile_follows_smiths_distribution() -> None:
    """Chi-square goodness of fit of the chosen gaps, and uniformity inside a gap (α = 1e-3)."""
    rng = np.random.default_rng(8)
    values = np.sort(rng.uniform(5, 60, size=12))
    q, eps = 0.3, 0.8
    probs = _smith_gap_probabilities(values, q, eps)
    noise = SeededNoise(np.random.default_rng(9))
    out = np.array([private_quantile(values, q, U, eps, noise) for _ in range(20000)])
    edges = np.concatenate(([0.0], values, [U]))
    gaps = np.clip(np.searchsorted(edges, out, side="right") - 1, 0, values.size)
    observed = np.bincount(gaps, minlength=values.size + 1)
    keep = probs * out.size >= 5
    expected = probs[keep] * out.size
    chi = stats.chisquare(observed[keep], expected * observed[keep].sum() / expected.sum())
    assert chi.pvalue > ALPHA
    top = int(np.argmax(probs))
    inside = (out[gaps == top] - edges[top]) / (edges[top + 1] - edges[top])
    assert stats.kstest(inside, stats.uniform.cdf).pvalue > ALPHA


def test_private_quantile_concentrates_near_the_true_quantile() -> None:
    """With k = 201 evenly spread values and ε = 2, P(|gap - qk| >= 16) = e^{-16} per draw."""
    values = np.linspace(1, 64, 201)
    noise = SeededNoise(np.random.default_rng(10))
    out = np.array([private_quantile(values, 0.5, U, 2.0, noise) for _ in range(2000)])
    ranks = np.searchsorted(values, out)
    # equal gap widths (but the two end gaps, which are far away): weights e^{-|i - 100.5|},
    # so the mass of |i - 100.5| >= 16 is e^{-16}; α = 2000 e^{-16} ≈ 2.3e-4
    assert np.all(np.abs(ranks - 100.5) < 16)


def _interval_probabilities(means: np.ndarray, tau: float, eps: float) -> np.ndarray:
    """002 Alg. 3 written out: bins of width τ, snap to midpoints, P(x) ∝ e^{-ε c(x)/4}."""
    n_bins = math.ceil(U / tau)
    mids = [(j + 0.5) * tau for j in range(n_bins)]
    snapped = [min(mids, key=lambda x, v=v: abs(x - v)) for v in means]
    cost = [max(sum(s < x for s in snapped), sum(s > x for s in snapped)) for x in mids]
    w = np.exp(-eps * np.array(cost, dtype=float) / 4)
    return w / w.sum()


def test_private_interval_follows_algorithm_3() -> None:
    rng = np.random.default_rng(11)
    means = np.concatenate((rng.normal(20, 3, 25), rng.uniform(0, U, 5)))
    tau, eps = 6.5, 0.6
    probs = _interval_probabilities(means, tau, eps)
    noise = SeededNoise(np.random.default_rng(12))
    centers = [private_interval(means, U, tau, eps, noise)[2] for _ in range(20000)]
    idx = np.round(np.array(centers) / tau - 0.5).astype(int)
    observed = np.bincount(idx, minlength=probs.size)
    keep = probs * len(centers) >= 5
    expected = probs[keep] * observed[keep].sum() / probs[keep].sum()
    assert stats.chisquare(observed[keep], expected).pvalue > ALPHA
    lo, hi, x = private_interval(means, U, tau, eps, noise)
    assert lo == max(0.0, x - 1.5 * tau) and hi == min(U, x + 1.5 * tau)


def test_private_interval_captures_concentrated_means() -> None:
    """200 means within ±τ/2 of 30: the bin of 30 costs 0 versus >= 100 elsewhere but its
    neighbours; with ε = 1 every draw's [a, b] (width 3τ) must contain all means."""
    rng = np.random.default_rng(13)
    tau = 4.0
    means = 30 + rng.uniform(-tau / 2, tau / 2, size=200)
    noise = SeededNoise(np.random.default_rng(14))
    for _ in range(500):
        lo, hi, _ = private_interval(means, U, tau, 1.0, noise)
        assert lo <= means.min() and means.max() <= hi


def test_interval_and_quantile_are_differentially_private() -> None:
    """Exact output laws on neighbouring inputs (one mean changed) differ by <= e^ε."""
    rng = np.random.default_rng(15)
    for _ in range(50):
        means = rng.uniform(0, U, size=15)
        other = means.copy()
        other[rng.integers(15)] = rng.uniform(0, U)
        eps = float(rng.uniform(0.1, 3))
        p, p2 = (_interval_probabilities(m, 5.0, eps) for m in (means, other))
        assert np.max(np.abs(np.log(p / p2))) <= eps / 2 + 1e-9  # Alg. 3 is ε/2-DP here
        grid = np.linspace(0, U, 4001)[1:-1]
        logs = []
        for m in (means, other):
            probs = _smith_gap_probabilities(m, 0.4, eps)
            z = np.concatenate(([0.0], np.sort(m), [U]))
            gap = np.clip(np.searchsorted(z, grid, side="right") - 1, 0, m.size)
            logs.append(np.log(probs[gap] / (z[gap + 1] - z[gap])))
        assert np.max(np.abs(logs[0] - logs[1])) <= eps + 1e-9
