"""Properties of the release sampler: its output grid, the exact private choice
(``noisy_max``) and its budget (that the release path cannot reach numpy's or the
``random`` module's generators: test_randomness_sources.py).

OpenDP's discretisation (opendp 0.16): ``make_laplace`` over floats takes a noise
granularity ``2^k``; the release path sets ``k = LAPLACE_K = -100`` (docs/math.md §9.1;
OpenDP's default is the smallest float exponent, -1074, four times slower). The input is
rounded to the nearest multiple of ``2^k``, integer noise from the discrete Laplace with
scale ``b / 2^k`` is added, and the exact result ``j · 2^k`` is rounded to the nearest
double (post-processing). The tests below read ``k`` off the measurement's own privacy
map (its rounding slack is ``2^k - 2^-1074``) and check the outputs against it, with
a ``k = -20`` measurement as the control that the method sees a coarser grid.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import opendp.prelude as dp
import pytest
from scipy import stats

from app.core import GridData, release_mean
from app.core.mechanisms import mean_centred as mc
from app.core.noise.laplace import (
    LAPLACE_K,
    ROUNDING_SLACK,
    OpenDPNoise,
    calibrate_choice_scale,
    calibrate_scale,
)
from research.noise import SeededNoise
from tests.security import audit_choices as choices
from tests.security import audit_lib as audit
from tests.unseeded import laws_hold

K_MIN = -1074  # -(1023) - 52 + 1
GRID = math.ldexp(1.0, LAPLACE_K)


def _production_measurement(scale: float) -> dp.Measurement:
    from app.core.noise.laplace import _MEASUREMENTS

    return _MEASUREMENTS.get(scale)


def _coarse(scale: float, k: int) -> dp.Measurement:
    return dp.m.make_laplace(
        dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale, k=k
    )


@pytest.mark.parametrize("scale", [1e-6, 0.0123, 0.5, 1.0, 4.1666666666666667, 37.5, 1e6])
def test_release_sampler_grid_is_2_to_the_laplace_k(scale: float) -> None:
    meas = _production_measurement(scale)
    # The map is roundup((d + 2^k - 2^-1074) / scale): at d = 0 it reads off k
    # (controls: the finest grid k = -1074 maps 0 to 0, and k = -20 far above).
    slack = Fraction(meas.map(0.0)) * Fraction(scale)
    assert slack >= ROUNDING_SLACK and slack == pytest.approx(float(ROUNDING_SLACK), rel=1e-9)
    assert _coarse(scale, K_MIN).map(0.0) == 0.0
    coarse = _coarse(scale, -20)
    assert coarse.map(0.0) * scale == pytest.approx(2.0**-20, rel=1e-9)
    assert meas.map(1.0) == pytest.approx(1.0 / scale, rel=1e-15)
    noise = OpenDPNoise()
    for value in (0.0, 0.1, 3.0, 1e-300):
        draws = [noise.laplace(value, scale) for _ in range(200)]
        for x in draws:
            assert math.isfinite(x)
            # on the 2^k grid: x = j · 2^k for an integer j
            assert (Fraction(x) / Fraction(GRID)).denominator == 1
        # and really that fine: the draws are not confined to a coarse grid such as 2^-20
        assert any((Fraction(x) * 2**20).denominator != 1 for x in draws)
        coarse_draws = [coarse(float(value)) for _ in range(50)]
        assert all((Fraction(x) * 2**20).denominator == 1 for x in coarse_draws)


def test_calibrated_scale_is_certified_by_the_privacy_map() -> None:
    """The scale used for a release makes OpenDP's own map charge at most eps."""
    for sens, eps in [(4.166666666666667, 0.5), (0.1, 3.0), (1e-9, 1e-6), (65.0, 0.01), (7, 0.7)]:
        scale = calibrate_scale(sens, eps)
        assert scale >= sens / eps
        assert _production_measurement(scale).map(sens) <= eps


# ------------------------------------------------------------- the private choice
@pytest.mark.parametrize(
    ("sens", "eps"), [(1, 0.5), (1, 3.0), (2, 0.7), (1, 1e-3), (3, 9.9), (1, 0.1 + 0.2)]
)
def test_choice_scale_is_the_smallest_the_privacy_map_certifies(sens: int, eps: float) -> None:
    scale = calibrate_choice_scale(sens, eps)
    space = dp.vector_domain(dp.atom_domain(T="i64")), dp.linf_distance(T="i64")
    meas = dp.m.make_noisy_max(*space, dp.max_divergence(), scale=scale)
    assert meas.map(sens) <= eps
    below = dp.m.make_noisy_max(*space, dp.max_divergence(), scale=math.nextafter(scale, 0.0))
    assert below.map(sens) > eps
    assert Fraction(scale) >= Fraction(2 * sens) / Fraction(eps)


def test_noisy_max_refuses_what_it_cannot_sample_exactly() -> None:
    src = OpenDPNoise()
    for bad in ([], [0.5, 1.0], [math.inf, 0], [[1, 2]], ["a"]):
        with pytest.raises(ValueError, match="scores"):
            src.noisy_max(bad, 1.0)
    for eps in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="epsilon"):
            src.noisy_max([0, 1], eps)
    for sens in (0, 1.5, True):
        with pytest.raises(ValueError, match="sensitivity"):
            src.noisy_max([0, 1], 1.0, sensitivity=sens)  # type: ignore[arg-type]
    assert src.noisy_max(np.array([3.0, -2.0, 7.0]), 1e6) == 2  # integral floats are fine


def test_noisy_max_draws_the_exact_law() -> None:
    """The production sampler (unseedable: :mod:`tests.unseeded`, false-failure rate 1e-8)
    and the seeded one (alpha = 1e-3) against the exact law of report-noisy-max with
    exponential noise (chi-square); a sampler at twice the budget is rejected by the same
    test (its power)."""
    scores = np.array([0, -1, -1, -3, 2, 1, -6, 0, 2])
    eps = 0.8
    probs = choices.noisy_max_law(scores, calibrate_choice_scale(1, eps))
    assert probs.sum() == pytest.approx(1.0, abs=1e-10)
    n = 4000
    keep = probs * n >= 5
    expected = probs[keep] / probs[keep].sum()

    def pvalue(obs: np.ndarray) -> float:
        return float(stats.chisquare(obs[keep], expected * obs[keep].sum()).pvalue)

    def production(epsilon: float) -> np.ndarray:
        return np.bincount(
            [OpenDPNoise().noisy_max(scores, epsilon) for _ in range(n)], minlength=9
        )

    laws_hold(lambda: {"production": pvalue(production(eps))})
    seeded_src = SeededNoise(np.random.default_rng(3))
    seeded = np.bincount([seeded_src.noisy_max(scores, eps) for _ in range(n)], minlength=9)
    assert pvalue(seeded) > 1e-3
    assert pvalue(production(2 * eps)) < 1e-12


def _issue_example() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """745 one-record users spread evenly over [0, 65]; user 0 moves from 0 to 65. The
    centre scores of centred_clip on both neighbours (they move by at most 1)."""
    v0 = np.linspace(0.0, 65.0, 745)
    v1 = v0.copy()
    v1[0] = 65.0
    cands = mc.centre_candidates(65.0)
    u0, u1 = mc.centre_utility(v0, cands), mc.centre_utility(v1, cands)
    assert np.max(np.abs(u0 - u1)) == 1
    return cands, u0, u1


@pytest.mark.parametrize("eps", [0.5, pytest.param(0.2, marks=pytest.mark.slow)])
def test_exact_audit_passes_noisy_max_and_fails_the_old_inverse_cdf_draw(eps: float) -> None:
    """On exact output laws (no sampling): the old 53-bit inverse-CDF draw gives one
    candidate probability 0 on one neighbour and a positive multiple of 2^-53 on the
    other (infinite privacy loss); report-noisy-max's law stays within e^eps."""
    _, u0, u1 = _issue_example()
    old0, old1 = (choices.inverse_cdf_law(eps * u / 2.0) for u in (u0, u1))
    assert old0.sum() == 1.0 and old1.sum() == 1.0
    flips = np.flatnonzero((old0 == 0) != (old1 == 0))
    assert flips.size >= 1
    assert min(max(old0[i], old1[i]) for i in flips) >= 2.0**-53
    assert choices.exact_choice_loss(old0, old1) == math.inf
    scale = calibrate_choice_scale(1, eps)
    new0, new1 = choices.noisy_max_law(u0, scale), choices.noisy_max_law(u1, scale)
    assert np.all(new0 > 0) and np.all(new1 > 0)
    loss = choices.exact_choice_loss(new0, new1)
    assert 0.5 * eps < loss <= eps * (1 + 1e-9)


def test_levy_interval_spends_exactly_its_share() -> None:
    """Exact law of levy's interval choice on its audit neighbours: loss <= ε/2 (its
    charge) and within 0.1% of it; the old exp(-ε c/8) weight spends only half."""
    s0, s1, eps, sens = choices.levy_interval_scores()
    assert eps == choices.LEVY_EPS / 2 and sens == 1
    scale = calibrate_choice_scale(sens, eps)
    loss = choices.exact_choice_loss(
        choices.noisy_max_law(s0, scale), choices.noisy_max_law(s1, scale)
    )
    assert 0.999 * eps < loss <= eps * (1 + 1e-9)
    old = choices.exact_choice_loss(
        choices.noisy_max_law(s0, 2 * scale), choices.noisy_max_law(s1, 2 * scale)
    )
    assert old < 0.5 * eps * (1 + 1e-3)


def _quantile_neighbours() -> tuple[GridData, GridData]:
    grids = []
    for heavy in (0.0, audit.U):
        users = [[heavy] * 50] + [[audit.U * (0.2 + 0.6 * i / 30)] * 50 for i in range(1, 31)]
        grids.append(GridData.from_user_values(users))
    return grids[0], grids[1]


@pytest.mark.parametrize("mechanism", ["quantile_fixed", "quantile_optimized", "centred_clip"])
def test_every_private_choice_is_within_its_budget_exactly(mechanism: str) -> None:
    """Each choice a mechanism makes, on neighbouring grids, has exact loss <= the budget it
    passes (and the budgets of its choices and its Laplace step sum to at most eps)."""
    eps = 8.0 if mechanism == "centred_clip" else 2.0  # centred_clip: past its public gate
    recs = []
    for grid in _quantile_neighbours():
        src = choices.ScoreRecorder()
        rel = release_mean(grid, audit.U, eps, mechanism, noise=src)
        recs.append((src.choices, rel))
    (c0, rel0), (c1, rel1) = recs
    assert len(c0) == len(c1) == 2
    if mechanism == "centred_clip":
        assert rel0.details["path"] == "adaptive"
        # the width step is audited given the released centre: both sides chose the same
        assert rel0.details["centre"] == rel1.details["centre"]
        noise_share = rel0.details["eps_noise"]
        # the width's scores are monotone: noisy max at 2·ε₂ charges ε₂ (docs/math.md §11.1)
        charged = [c0[0][1], c0[1][1] / 2]
    else:
        noise_share = eps / 2
        charged = [e for _, e, _ in c0]
    assert sum(charged) + noise_share <= eps
    for (s0, e, d), (s1, e1, d1) in zip(c0, c1, strict=True):
        assert e == e1 and d == d1 == 1
        assert np.max(np.abs(s0 - s1)) <= 1
        scale = calibrate_choice_scale(d, e)
        p0, p1 = choices.noisy_max_law(s0, scale), choices.noisy_max_law(s1, scale)
        assert choices.exact_choice_loss(p0, p1) <= e * (1 + 1e-9), mechanism
