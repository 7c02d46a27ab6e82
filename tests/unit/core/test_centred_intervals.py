"""The honest ci95 of ``centred_clip`` (mean) and ``centred`` (variance), docs/math.md §11.6.

Brute force: for every centre and clip level the choice could make, the truth minus the
noiseless estimate lies in the spread computed with the number of users actually clipped,
on random datasets biased to the extremes, with caps. Exact coverage: given each centre,
the law of the width (or clip-level) choice is computed exactly (quadrature of OpenDP's
noisy max) and the Laplace CDF gives the coverage, on the audit's adversarial grids; a
broken copy (a spread that allows for no clipped user) is caught by both.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core import GridData, release_mean, release_variance
from app.core.data.counts import prepare_counts
from app.core.mechanisms import mean_centred as mc
from app.core.mechanisms import variance_centred as vc
from app.core.mechanisms.float_sums import exact_sum, float_sum_sensitivity, split_shares
from app.core.mechanisms.interval import isolated_head_sums
from app.core.mechanisms.mean_window import SPREAD_BETA, clipped_bound, window_weights
from app.core.noise.laplace import calibrate_choice_scale, calibrate_scale
from tests.security.audit_choices import noisy_max_law
from tests.unit.core.helpers import ZeroNoise

U = 30.0


def _laplace_cdf(x: float, scale: float) -> float:
    return 0.5 * math.exp(x / scale) if x < 0 else 1.0 - 0.5 * math.exp(-x / scale)


def _extreme_grid(rng: np.random.Generator) -> GridData:
    users = []
    for _ in range(int(rng.integers(1, 7))):
        kind = rng.integers(3)
        m = int(rng.integers(1, 5))
        if kind == 0:
            users.append(list(rng.choice([0.0, U], size=m)))
        elif kind == 1:
            users.append([float(rng.choice([0.0, U / 2, U]))] * m)
        else:
            users.append(list(rng.uniform(0, U, size=m)))
    return GridData.from_user_values(users)


def _caps(rng: np.random.Generator, grid: GridData) -> np.ndarray:
    caps = grid.counts.copy()
    if rng.random() < 0.5:
        caps = np.maximum(1, caps - rng.integers(0, 3, size=caps.size))
    return caps


SEARCH = [pytest.param(15, id="quick"), pytest.param(400, id="wide", marks=pytest.mark.slow)]


@pytest.mark.parametrize("datasets", SEARCH)
def test_mean_spread_holds_on_every_window_brute_force(datasets: int) -> None:
    rng = np.random.default_rng(11)
    broken_missed = 0
    for _ in range(datasets):
        grid = _extreme_grid(rng)
        info = prepare_counts(grid.counts, _caps(rng, grid))
        mu = exact_sum(grid.values) / grid.values.size
        m = info.eff[info.active].astype(np.float64)
        sums = np.clip(isolated_head_sums(grid, info.eff)[info.active], 0.0, U * m)
        for c in (0.0, U / 3, U / 2, U):
            R = mc.half_widths(U, info.m_max, 0.5)
            clipped = mc.clipped_counts(sums, m, U, c, R)
            assert clipped[-1] == 0  # the top window clips nobody
            for j in range(R.size):
                lo, hi = mc.centred_window(m, U, c, float(R[j]))
                theta = exact_sum(np.clip(sums, lo, hi)) / info.n_eff
                s = mc.centred_spread(info, U, lo, hi, int(clipped[j]))
                assert -s.below - 1e-9 <= mu - theta <= s.above + 1e-9
                none = mc.centred_spread(info, U, lo, hi, 0)
                broken_missed += not (-none.below - 1e-9 <= mu - theta <= none.above + 1e-9)
    assert broken_missed > 0  # a spread that ignores the clipped users fails


@pytest.mark.parametrize("datasets", SEARCH)
def test_variance_spread_holds_on_every_level_brute_force(datasets: int) -> None:
    rng = np.random.default_rng(12)
    broken_missed = 0
    for _ in range(datasets):
        grid = _extreme_grid(rng)
        info = prepare_counts(grid.counts, _caps(rng, grid))
        var = float(np.var(grid.values))
        w = window_weights(info)
        keep = grid.record_rank < info.eff[grid.record_user]
        x = grid.values[keep]
        starts = np.zeros(info.n_active, dtype=np.int64)
        np.cumsum(info.eff[info.active][:-1], out=starts[1:])
        m = info.eff[info.active].astype(np.float64)
        v = np.clip(np.add.reduceat(x, starts) / m, 0.0, U)
        for c in np.arange(0, 33, 4) * (U / 32):
            q = np.add.reduceat((x - c) ** 2, starts) / m
            levels = vc.moment_levels(U, float(c))
            assert np.all(q <= levels[-1])  # the top level clips nobody
            for Q in levels.tolist():
                V = vc.centred_variance_value(w, v, q, float(c), Q)
                A = int((q > Q).sum())
                s = vc.centred_variance_spread(info, U, w, float(c), Q, A)
                assert -s.below - 1e-9 <= var - V <= s.above + 1e-9
                none = vc.centred_variance_spread(info, U, w, float(c), Q, 0)
                broken_missed += not (-none.below - 1e-9 <= var - V <= none.above + 1e-9)
    assert broken_missed > 0


def mean_coverage(grid: GridData, eps: float, *, honest: bool = True) -> float:
    """min over every likely centre of P(μ ∈ ci95 | centre) for ``centred_clip`` at ``eps``.
    ``honest=False`` is the broken copy: a spread that allows for no clipped user."""
    info = prepare_counts(grid.counts)
    _, e2, e3 = split_shares(eps, (0.4, 0.2))
    m = info.eff[info.active].astype(np.float64)
    sums = np.clip(isolated_head_sums(grid, info.eff)[info.active], 0.0, U * m)
    R = mc.half_widths(U, info.m_max, 0.5)
    pen = mc.width_penalties(R, m.size, info.n_eff, e3, U)
    mu = exact_sum(grid.values) / grid.values.size
    worst = 1.0
    for c in np.unique(np.r_[0.0, U / 2, U, np.round(sums / m / U * 256) * U / 256]).tolist():
        law = noisy_max_law(
            -mc.clipped_counts(sums, m, U, c, R) - pen, calibrate_choice_scale(1, 2.0 * e2)
        )
        covered = 0.0
        for j, p_j in enumerate(law):
            lo, hi = mc.centred_window(m, U, c, float(R[j]))
            theta = min(max(exact_sum(np.clip(sums, lo, hi)) / info.n_eff, 0.0), U)
            A = min(m.size, clipped_bound(pen, j, e2)) if honest else 0
            spread = mc.centred_spread(info, U, lo, hi, A)
            scale = calibrate_scale(float_sum_sensitivity(float((hi - lo).max()) / m.sum(), U), e3)
            qn = scale * math.log(1.0 / (0.05 - SPREAD_BETA))
            a, b = mu - theta - qn - spread.above, mu - theta + qn + spread.below
            covered += p_j * (_laplace_cdf(b, scale) - _laplace_cdf(a, scale))
        worst = min(worst, covered)
    return worst


ADVERSARIAL = {
    "one-heavy": [[U] * 40] + [[5.0]] * 80,
    "most-at-0": [[0.0, 0.0]] * 90 + [[U, U]] * 10,
    "most-at-U": [[U] * 3] * 90 + [[0.0] * 3] * 10,
    "two-camps": [[0.0] * 5] * 50 + [[U] * 5] * 50,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_mean_adversarial_grids_cover_at_least_95_percent(name: str, eps: float) -> None:
    assert mean_coverage(GridData.from_user_values(ADVERSARIAL[name]), eps) >= 0.95


@pytest.mark.slow
def test_a_spread_without_clipped_users_breaks_the_coverage() -> None:
    assert mean_coverage(GridData.from_user_values(ADVERSARIAL["two-camps"]), 1.0) >= 0.95
    assert (
        mean_coverage(GridData.from_user_values(ADVERSARIAL["two-camps"]), 1.0, honest=False) < 0.9
    )


def variance_coverage(grid: GridData, eps: float) -> float:
    """min over every centre of P(σ² ∈ ci95 | centre) for ``centred`` at ``eps``."""
    info = prepare_counts(grid.counts)
    _, e_q, e_n = split_shares(eps, (0.4, 0.1))
    w = window_weights(info)
    w_max = float(w.max())
    m = info.eff[info.active].astype(np.float64)
    x = grid.values
    starts = grid.offsets[:-1]
    v = np.clip(np.add.reduceat(x, starts) / m, 0.0, U)
    var = float(np.var(x))
    unit = vc.centred_sensitivity(w_max, 1.0) * m.size / e_n
    worst = 1.0
    for c in (np.arange(33) * (U / 32)).tolist():
        q = np.add.reduceat((x - c) ** 2, starts) / m
        levels = vc.moment_levels(U, c)
        pen = np.round(np.log2(levels / levels[0]) * unit).astype(np.int64)
        clipped = np.array([(q > Q).sum() for Q in levels])
        law = noisy_max_law(-clipped - pen, calibrate_choice_scale(1, 2.0 * e_q))
        covered = 0.0
        for j, p_j in enumerate(law):
            Q = float(levels[j])
            V = vc.centred_variance_value(w, v, q, c, Q)
            spread = vc.centred_variance_spread(
                info, U, w, c, Q, min(m.size, clipped_bound(pen, j, e_q))
            )
            scale = calibrate_scale(vc.centred_sensitivity(w_max, Q), e_n)
            qn = scale * math.log(1.0 / (0.05 - SPREAD_BETA))
            a, b = var - V - qn - spread.above, var - V + qn + spread.below
            covered += p_j * (_laplace_cdf(b, scale) - _laplace_cdf(a, scale))
        worst = min(worst, covered)
    return worst


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_variance_adversarial_grids_cover_at_least_95_percent(name: str) -> None:
    assert variance_coverage(GridData.from_user_values(ADVERSARIAL[name]), 1.0) >= 0.95


@pytest.mark.slow
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_itms_like_defaults_carry_an_interval(eps: float) -> None:
    from app.synth.itms import ITMS_U
    from research.paper002 import itms_dataset

    grid = itms_dataset(0)
    mean = release_mean(grid, ITMS_U, eps, noise=ZeroNoise(1))
    var = release_variance(grid, ITMS_U, eps, noise=ZeroNoise(2))
    assert (mean.mechanism, var.mechanism) == ("centred_clip", "centred")
    assert mean.ci95 is not None and mean.ci95[0] <= grid.values.mean() <= mean.ci95[1]
    assert var.ci95 is not None and var.ci95[0] <= grid.values.var() <= var.ci95[1]
