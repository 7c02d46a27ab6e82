"""Noise calibration: scale = sensitivity/ε (2·sensitivity/ε for levy, quantile) and OpenDP's map.

These tests look only at the scales and OpenDP's privacy maps, never at noisy values,
except the last ones, which check that the release path draws through OpenDP.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import opendp.prelude as dp
import pytest

from app.core import (
    MEAN_MECHANISMS,
    GridData,
    OpenDPNoise,
    calibrate_scale,
    default_noise,
    plan_joint,
    plan_mean,
    plan_variance,
    release_mean,
)
from app.core.noise import laplace as noise_module
from app.core.noise.laplace import LAPLACE_K
from app.core.noise.lean_make import lean_make_laplace
from research.noise import SeededNoise
from tests.unit.core.helpers import random_grid

dp.enable_features("contrib")
U = 65.0
COUNTS = [np.array([417, 46, 46, 3, 1, 1, 90, 12]), np.array([5, 5, 5]), np.arange(1, 40)]
EPSILONS = [0.05, 0.3, 1.0, 2 / 3, 7.0]
PRIVATE_INTERVAL = {"levy", "quantile_fixed", "quantile_optimized"}
ADAPTIVE = {"centred_clip", "user_window", "auto"}  # private steps before the Laplace step


def _opendp_map(scale: float, sensitivity: float) -> float:
    """OpenDP's own map, built here at the release path's noise grid (docs/math.md §9.1)."""
    domain = dp.atom_domain(T=float, nan=False)
    meas = dp.m.make_laplace(domain, dp.absolute_distance(T=float), scale, k=LAPLACE_K)
    return float(meas.map(sensitivity))


@pytest.mark.parametrize("counts", COUNTS, ids=lambda c: f"L{c.size}")
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("mechanism", sorted(set(MEAN_MECHANISMS) - PRIVATE_INTERVAL))
def test_mean_scale_is_sensitivity_over_eps(counts: np.ndarray, eps: float, mechanism: str) -> None:
    plan = plan_mean(counts, U, eps, mechanism)
    if mechanism in ADAPTIVE and plan.details.get("path", "adaptive") == "adaptive":
        assert plan.sensitivity is None  # chosen at release: test_centred_clip_spends_its_shares
        return
    assert plan.sensitivity is not None and plan.noise_scale is not None
    if plan.sensitivity == 0:  # worst_case_optimal with T = 0 needs no noise
        assert plan.noise_scale == 0
        assert plan.mechanism in {"worst_case_optimal", *ADAPTIVE}
        return
    assert plan.noise_scale == pytest.approx(plan.sensitivity / eps, rel=1e-12)
    assert plan.noise_scale >= plan.sensitivity / eps
    assert _opendp_map(plan.noise_scale, plan.sensitivity) <= eps


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("mechanism", sorted(PRIVATE_INTERVAL))
def test_interval_mechanisms_spend_half_on_the_interval(eps: float, mechanism: str) -> None:
    grid = random_grid(np.random.default_rng(5), U, n_users=30, max_count=40)
    plan = plan_mean(grid.counts, U, eps, mechanism)
    assert plan.sensitivity is None and plan.noise_scale is None and plan.worst_case_error is None
    rel = release_mean(grid, U, eps, mechanism, noise=SeededNoise(np.random.default_rng(1)))
    assert np.array_equal(rel.kept, plan.kept)
    assert rel.noise_scale == pytest.approx(2 * rel.sensitivity / eps, rel=1e-12)
    assert _opendp_map(rel.noise_scale, rel.sensitivity) <= eps / 2
    assert rel.worst_case_bias is None and rel.worst_case_error is None
    lo, hi = rel.details["interval_lo"], rel.details["interval_hi"]
    assert rel.sensitivity == pytest.approx((hi - lo) / rel.details["K_bar"])


@pytest.mark.parametrize("eps", [0.5, 1.0, 2 / 3, 7.0])
def test_centred_clip_spends_its_shares(eps: float) -> None:
    """Centre and width draws take 0.4 and 0.2 of eps; the Laplace step the rest (0.4):
    noise_scale = sensitivity / (0.4 eps), certified by OpenDP's map at that share."""
    grid = random_grid(np.random.default_rng(6), U, n_users=250, max_count=30)
    plan = plan_mean(grid.counts, U, eps, "centred_clip")
    assert plan.details["path"] == "adaptive"
    assert plan.sensitivity is None and plan.noise_scale is None and plan.worst_case_error is None
    d = plan.details
    assert d["eps_centre"] + d["eps_width"] + d["eps_noise"] <= eps
    assert d["eps_centre"] + d["eps_width"] + d["eps_noise"] == pytest.approx(eps, rel=1e-12)
    rel = release_mean(grid, U, eps, "centred_clip", noise=SeededNoise(np.random.default_rng(2)))
    assert np.array_equal(rel.kept, plan.kept)
    assert rel.noise_scale == pytest.approx(rel.sensitivity / (0.4 * eps), rel=1e-12)
    assert _opendp_map(rel.noise_scale, rel.sensitivity) <= d["eps_noise"]
    assert rel.worst_case_bias is None and rel.worst_case_error is None


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("mechanism", ["baseline", "clip"])
def test_variance_scale(eps: float, mechanism: str) -> None:
    plan = plan_variance(COUNTS[0], U, eps, mechanism)
    assert plan.noise_scale == pytest.approx(plan.sensitivity / eps, rel=1e-12)
    assert _opendp_map(plan.noise_scale, plan.sensitivity) <= eps


@pytest.mark.parametrize("split", ["half", "optimal"])
@pytest.mark.parametrize("mechanism", ["baseline", "clip"])
def test_joint_shares(split: str, mechanism: str) -> None:
    eps = 0.9
    mean, var = plan_joint(COUNTS[0], U, eps, mechanism, split=split)
    assert mean.epsilon + var.epsilon == pytest.approx(eps)
    if split == "half":
        assert mean.epsilon == var.epsilon == pytest.approx(eps / 2)
    for part in (mean, var):
        assert part.noise_scale == pytest.approx(part.sensitivity / part.epsilon, rel=1e-12)
        assert _opendp_map(part.noise_scale, part.sensitivity) <= part.epsilon


def test_calibration_is_certified_and_within_two_steps_of_the_smallest() -> None:
    """Against OpenDP's map by brute force: the scale is certified, and stepping down one
    float at a time finds the smallest certified scale at most two steps below (the price of
    padding Δ by the grid's rounding slack, docs/math.md §9.2)."""
    rng = np.random.default_rng(7)
    steps_seen = set()
    for _ in range(300):
        sens = float(10 ** rng.uniform(-6, 4))
        eps = float(10 ** rng.uniform(-4, 1.5))
        scale = calibrate_scale(sens, eps)
        assert _opendp_map(scale, sens) <= eps  # certified by OpenDP itself
        steps, below = 0, scale
        while _opendp_map(math.nextafter(below, 0.0), sens) <= eps:
            below, steps = math.nextafter(below, 0.0), steps + 1
            assert steps <= 2
        steps_seen.add(steps)
    assert steps_seen <= {0, 1, 2} and steps_seen - {0}  # some inputs pay the padding
    assert calibrate_scale(0.0, 1.0) == 0.0


def test_tiny_sensitivities_pay_the_rounding_slack() -> None:
    """Where 2^k is not lost in Δ's rounding, a scale from Δ alone is refused by OpenDP's
    map and the calibrated one is certified (the slack is really accounted)."""
    for sens, eps in ((1e-25, 1e-3), (2.0**-90, 0.5), (3e-28, 7.0)):
        bare = float(Fraction(sens) / Fraction(eps)) * (1 + 2**-50)
        assert _opendp_map(bare, sens) > eps
        assert _opendp_map(calibrate_scale(sens, eps), sens) <= eps


@pytest.mark.parametrize(("sens", "eps"), [(-1.0, 1.0), (math.nan, 1.0), (1.0, 0.0), (1.0, -2.0)])
def test_calibration_refuses_bad_inputs(sens: float, eps: float) -> None:
    with pytest.raises(ValueError, match="must be finite"):
        calibrate_scale(sens, eps)


def test_calibration_refuses_an_overflowing_scale() -> None:
    with pytest.raises(ValueError, match="overflows"):
        calibrate_scale(1e300, 1e-300)


def test_import_check_fails_closed_when_opendp_map_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class _Stricter:  # a map that charges one ulp more than d_in / scale
        def __init__(self, scale: float) -> None:
            self.scale = scale

        def map(self, d_in: float) -> float:
            return math.nextafter(d_in / self.scale, math.inf)

    monkeypatch.setattr(noise_module, "_make_laplace", _Stricter)
    with pytest.raises(RuntimeError, match="privacy map changed"):
        noise_module._check_against_opendp()
    monkeypatch.undo()
    noise_module._check_against_opendp()  # the real OpenDP passes


class _SpyMeasurement:
    def __init__(self, inner: dp.Measurement, calls: list[tuple[float, float]]) -> None:
        self.inner, self.calls = inner, calls

    def __call__(self, value: float) -> float:
        out = self.inner(value)
        self.calls.append((value, out))
        return out

    def map(self, d_in: float) -> float:
        return self.inner.map(d_in)


def test_release_path_draws_from_opendp(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[float] = []
    calls: list[tuple[float, float]] = []
    real = dp.m.make_laplace

    def spy(domain: object, metric: object, scale: float, k: int | None = None) -> _SpyMeasurement:
        assert k == LAPLACE_K  # the release path's noise grid (docs/math.md §9.1)
        made.append(scale)
        return _SpyMeasurement(real(domain, metric, scale, k=k), calls)

    # the constructor the release path calls: OpenDP's library function with its arguments
    # converted once (checked against the public one at import), else the public one
    monkeypatch.setattr(noise_module, "lean_make_laplace", spy)

    real_invoke = noise_module.invoke_scalar

    def invoke(meas: _SpyMeasurement, value: float) -> float:  # the lean call, on the real one
        out = real_invoke(meas.inner, value)
        calls.append((value, out))
        return out

    monkeypatch.setattr(dp.m, "make_laplace", spy)
    monkeypatch.setattr(noise_module, "invoke_scalar", invoke)
    monkeypatch.setattr(
        noise_module, "_MEASUREMENTS", noise_module.MeasurementCache(noise_module._make_laplace)
    )
    assert isinstance(default_noise(), OpenDPNoise) and noise_module._LEAN
    grid = GridData.from_user_values([[10.0, 20.0, 30.0], [40.0], [50.0, 60.0]])
    rel = release_mean(grid, U, 1.0, "baseline")
    assert rel.noise_scale in made
    assert len(calls) == 1
    value_in, value_out = calls[0]
    assert value_in == pytest.approx(35.0)  # the noiseless mean went into OpenDP
    assert rel.estimate == min(max(value_out, 0.0), U)  # OpenDP's output, projected on [0, U]


def test_private_choices_draw_from_opendp_noisy_max(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every private choice is OpenDP's make_noisy_max at the scale its map certifies."""
    made: list[float] = []
    real = dp.m.make_noisy_max

    def spy(domain: object, metric: object, measure: object, scale: float) -> dp.Measurement:
        made.append(scale)
        return real(domain, metric, measure, scale=scale)

    monkeypatch.setattr(dp.m, "make_noisy_max", spy)
    monkeypatch.setattr(
        noise_module, "_CHOICES", noise_module.MeasurementCache(noise_module._make_noisy_max)
    )
    src = OpenDPNoise()
    assert src.noisy_max([0, -5, 3], 0.7) in (0, 1, 2)
    assert made == [noise_module.calibrate_choice_scale(1, 0.7)]
    assert src.noisy_max(np.array([1, 2]), 0.7, sensitivity=2) in (0, 1)
    assert made[-1] == noise_module.calibrate_choice_scale(2, 0.7) == pytest.approx(4 / 0.7)
    grid = GridData.from_user_values([[float(i % 7)] * 30 for i in range(40)])
    release_mean(grid, U, 1.0, "levy")
    assert len(made) == 3  # levy's interval: one more choice, through OpenDP


def test_the_lean_constructor_builds_opendps_measurement() -> None:
    """The release path builds its scalar Laplace measurements by OpenDP's library function
    with the arguments converted once (``app.core.noise.lean_make``): the same privacy map
    as the public constructor at any scale (the rounding slack of ``k`` included), and at
    scale 0 the same output. The law of its draws: ``test_batched_noise``'s scalar draws."""
    assert noise_module._LEAN_MAKE
    domain, metric = noise_module._DOMAIN, noise_module._METRIC
    rng = np.random.default_rng(11)
    for scale in np.exp(rng.uniform(-12, 12, size=60)).tolist():
        lean = lean_make_laplace(domain, metric, scale, LAPLACE_K)
        public = dp.m.make_laplace(domain, metric, scale, k=LAPLACE_K)
        for d_in in (0.0, 1.0, 30.0, float(rng.uniform(0, 100))):
            assert lean.map(d_in) == public.map(d_in)
        assert str(lean.output_measure) == str(public.output_measure)
    zero = lean_make_laplace(domain, metric, 0.0, LAPLACE_K)
    for v in rng.uniform(-1e6, 1e6, size=20).tolist():
        assert zero(v) == dp.m.make_laplace(domain, metric, 0.0, k=LAPLACE_K)(v)
