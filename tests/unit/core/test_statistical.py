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
from app.core.mechanisms.interval import (
    QUANTILE_STEPS,
    private_interval,
    private_quantile,
    quantile_candidates,
    quantile_scores,
)
from research.noise import SeededNoise
from tests.security.audit_choices import noisy_max_law
from tests.unit.core.helpers import ZeroNoise
from tests.unseeded import laws_hold

U = 65.0
ALPHA = 1e-3


def _grid(seed: int = 0) -> GridData:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 60, size=40)
    values = np.clip(rng.normal(20.7, 10.7, size=int(counts.sum())), 0, U)
    return GridData.from_counts_and_values(counts, values)


class _RawSeeded(SeededNoise):
    """SeededNoise that remembers each noisy value before the release projects it."""

    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__(rng)
        self.raw: list[float] = []

    def laplace(self, value: float, scale: float) -> float:
        out = super().laplace(value, scale)
        self.raw.append(out)
        return out


@pytest.mark.parametrize(
    ("statistic", "mechanism"),
    [
        ("mean", "baseline"),
        ("mean", "clip"),
        ("mean", "opt_array"),
        ("mean", "worst_case_optimal"),
        ("variance", "clip"),
    ],
)
def test_noise_is_laplace_with_the_reported_scale(statistic: str, mechanism: str) -> None:
    """KS test of (raw noisy value - noiseless)/scale against Lap(1), α = 1e-3, seed fixed;
    the released estimate is the raw value projected onto the statistic's range."""
    grid = _grid()
    release = release_mean if statistic == "mean" else release_variance
    top = U if statistic == "mean" else U * U / 4
    truth = release(grid, U, 0.7, mechanism, noise=ZeroNoise()).estimate
    noise = _RawSeeded(np.random.default_rng(42))
    draws = [release(grid, U, 0.7, mechanism, noise=noise) for _ in range(3000)]
    z = np.array([(x - truth) / r.noise_scale for x, r in zip(noise.raw, draws, strict=True)])
    assert stats.kstest(z, stats.laplace.cdf).pvalue > ALPHA
    est = np.array([r.estimate for r in draws])
    assert np.array_equal(est, np.clip(noise.raw, 0.0, top))


def test_opendp_noise_is_laplace_with_the_reported_scale() -> None:
    """Same KS test on the release path's OpenDP sampler (unseedable CSPRNG: it fails
    only when two samples both reject, :mod:`tests.unseeded`)."""
    grid = _grid(1)
    truth = release_mean(grid, U, 1.3, "clip", noise=ZeroNoise()).estimate

    def law() -> dict[str, float]:
        draws = [release_mean(grid, U, 1.3, "clip") for _ in range(3000)]
        z = np.array([(r.estimate - truth) / r.noise_scale for r in draws])
        return {"KS": stats.kstest(z, stats.laplace.cdf).pvalue}

    laws_hold(law)


@pytest.mark.parametrize("mechanism", ["baseline", "clip", "array_avg_bestfit"])
def test_ci95_covers_the_noiseless_estimate_at_95_percent(mechanism: str) -> None:
    """Coverage of the noiseless estimate by ``ci95`` (``raw ± (b ln 20 + bias)``, then
    projected) is at least Binomial(N, 0.95); exactly that for baseline, whose bias is 0:
    binomial tests, α = 1e-3."""
    grid = _grid(2)
    n_runs = 2000
    covered = 0
    for i in range(n_runs):
        plain = release_mean(grid, U, 0.5, mechanism, noise=ZeroNoise(seed=i))
        rng = np.random.default_rng(i)
        noisy = release_mean(grid, U, 0.5, mechanism, noise=_SharedDraws(rng, seed=i))
        assert noisy.ci95 is not None and noisy.ci95_note is None
        lo, hi = noisy.ci95
        assert 0.0 <= lo <= noisy.estimate <= hi <= U
        covered += lo <= plain.estimate <= hi
    side = "two-sided" if mechanism == "baseline" else "less"
    assert stats.binomtest(covered, n_runs, 0.95, alternative=side).pvalue > ALPHA


def test_privately_projected_mechanisms_report_no_interval() -> None:
    grid = _grid(2)
    for mechanism in ("levy", "quantile_fixed", "quantile_optimized"):
        rel = release_mean(grid, U, 0.5, mechanism, noise=ZeroNoise(seed=1))
        assert rel.ci95 is None and rel.worst_case_bias is None
        assert rel.ci95_note and mechanism in rel.ci95_note
        assert 0.0 <= rel.estimate <= U


class _SharedDraws(ZeroNoise):
    """Same interval draws as ``ZeroNoise(seed)``, plus Laplace noise from ``rng``."""

    def __init__(self, rng: np.random.Generator, seed: int) -> None:
        super().__init__(seed)
        self.lap = rng

    def laplace(self, value: float, scale: float) -> float:
        return float(value + self.lap.laplace(0.0, scale)) if scale > 0 else float(value)


def _quantile_scores(values: np.ndarray, q: float) -> np.ndarray:
    """The private quantile's scores written out independently, on the grid jU/128."""
    k = len(values)
    out = []
    for x in (j * U / QUANTILE_STEPS for j in range(QUANTILE_STEPS + 1)):
        below = sum(v < x for v in values)
        upto = sum(v <= x for v in values)
        out.append(-max(0, below - math.floor(q * k), math.ceil(q * k) - upto))
    return np.array(out)


def _chi_square_fits(observed: np.ndarray, probs: np.ndarray) -> float:
    keep = probs * observed.sum() >= 5
    expected = probs[keep] * observed[keep].sum() / probs[keep].sum()
    return float(stats.chisquare(observed[keep], expected).pvalue)


def test_private_quantile_follows_its_law() -> None:
    """Chi-square goodness of fit of the chosen candidates against the exact law of
    report-noisy-max with exponential noise of scale 2/ε on the rank scores (α = 1e-3)."""
    rng = np.random.default_rng(8)
    values = np.sort(rng.uniform(5, 60, size=12))
    q, eps = 0.3, 0.8
    scores = _quantile_scores(values, q)
    assert np.array_equal(scores, quantile_scores(values, q, quantile_candidates(U)))
    probs = noisy_max_law(scores, 2.0 / eps)
    noise = SeededNoise(np.random.default_rng(9))
    out = np.array([private_quantile(values, q, U, eps, noise) for _ in range(20000)])
    idx = np.round(out / (U / QUANTILE_STEPS)).astype(int)
    assert np.allclose(idx * (U / QUANTILE_STEPS), out)
    observed = np.bincount(idx, minlength=QUANTILE_STEPS + 1)
    assert _chi_square_fits(observed, probs) > ALPHA


def test_private_quantile_concentrates_near_the_true_quantile() -> None:
    """k = 201 evenly spread values, ε = 2: a candidate whose rank misses the median by
    r >= 16 has probability <= e^{-r} (score -r, scale 1), 129 candidates: α <= 2000·129·e^{-16}
    ≈ 2.9e-2 is an upper bound; in fact the mass sits within a few ranks."""
    values = np.linspace(1, 64, 201)
    noise = SeededNoise(np.random.default_rng(10))
    out = np.array([private_quantile(values, 0.5, U, 2.0, noise) for _ in range(2000)])
    ranks = np.searchsorted(values, out)
    assert np.all(np.abs(ranks - 100.5) < 16)


def _interval_probabilities(means: np.ndarray, tau: float, eps: float) -> np.ndarray:
    """002 Alg. 3 written out: bins of width τ, snap to midpoints, cost c(x); the choice is
    report-noisy-max on -c at budget ε (exponential noise of scale 2/ε)."""
    n_bins = math.ceil(U / tau)
    mids = [(j + 0.5) * tau for j in range(n_bins)]
    snapped = [min(mids, key=lambda x, v=v: abs(x - v)) for v in means]
    cost = [max(sum(s < x for s in snapped), sum(s > x for s in snapped)) for x in mids]
    return noisy_max_law(-np.array(cost), 2.0 / eps)


def test_private_interval_follows_algorithm_3() -> None:
    rng = np.random.default_rng(11)
    means = np.concatenate((rng.normal(20, 3, 25), rng.uniform(0, U, 5)))
    tau, eps = 6.5, 0.6
    probs = _interval_probabilities(means, tau, eps)
    noise = SeededNoise(np.random.default_rng(12))
    centers = [private_interval(means, U, tau, eps, noise)[2] for _ in range(20000)]
    idx = np.round(np.array(centers) / tau - 0.5).astype(int)
    observed = np.bincount(idx, minlength=probs.size)
    assert _chi_square_fits(observed, probs) > ALPHA
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


@pytest.mark.slow
def test_interval_and_quantile_are_differentially_private() -> None:
    """Exact output laws on neighbouring inputs (one mean changed) differ by <= e^ε: the
    whole budget each step is given, and no more."""
    rng = np.random.default_rng(15)
    worst = 0.0
    for _ in range(30):
        means = rng.uniform(0, U, size=15)
        other = means.copy()
        other[rng.integers(15)] = rng.uniform(0, U)
        eps = float(rng.uniform(0.1, 3))
        p, p2 = (_interval_probabilities(m, 5.0, eps) for m in (means, other))
        loss = np.max(np.abs(np.log(p / p2)))
        assert loss <= eps * (1 + 1e-9)
        worst = max(worst, loss / eps)
        p, p2 = (noisy_max_law(_quantile_scores(m, 0.4), 2.0 / eps) for m in (means, other))
        assert np.max(np.abs(np.log(p / p2))) <= eps * (1 + 1e-9)
    assert worst > 0.5  # the interval step really spends more than the old ε/2 of its share
