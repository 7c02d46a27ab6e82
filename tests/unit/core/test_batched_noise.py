"""Batched Laplace draws (docs/math.md §9.4.7): one OpenDP vector ``make_laplace`` call
per scale, the law of the scalar measurement per coordinate, and the two-step release
(``start_releases`` / ``finish_releases``, the one engine path) equal to the estimator and
one scalar Laplace draw composed by hand.

No seed can be fixed for OpenDP's sampler, so the laws are checked with Kolmogorov-Smirnov
tests at alpha = 1e-4 in all, failing only when two independent samples both reject
(:mod:`tests.unseeded`: a correct sampler fails with probability 1e-8).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from app.core import (
    GridData,
    finish_releases,
    release_mean,
    release_variance,
    start_releases,
)
from app.core.data.counts import prepare_counts
from app.core.data.results import statistic_range
from app.core.mechanisms import registry
from app.core.noise import laplace as noise_mod
from app.core.noise.laplace import OpenDPNoise, calibrate_scale, laplace_many
from research.noise import SeededNoise
from tests.unseeded import laws_hold

TINY = math.ldexp(1.0, noise_mod.LAPLACE_K)  # the release path's noise grid (§9.1)


class _Counting:
    """Wraps a measurement cache's ``get`` and counts the calls per key."""

    def __init__(self, cache: noise_mod.MeasurementCache) -> None:
        self.cache, self.inner, self.calls = cache, cache.get, []

    def __call__(self, key: object) -> object:
        self.calls.append(key)
        return self.inner(key)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, _Counting]:
    out = {"vector": _Counting(noise_mod._VECTORS), "scalar": _Counting(noise_mod._MEASUREMENTS)}
    monkeypatch.setattr(noise_mod._VECTORS, "get", out["vector"])
    monkeypatch.setattr(noise_mod._MEASUREMENTS, "get", out["scalar"])
    return out


def test_one_vector_call_per_shared_scale(counted: dict[str, _Counting]) -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    scales = [0.5, 2.0, 0.5, 0.0, 2.0, 0.7]
    out = OpenDPNoise().laplace_many(values, scales)
    assert len(out) == 6 and out[3] == 4.0  # scale 0: no noise
    assert sorted(counted["vector"].calls) == [(0.5, 2), (2.0, 2)]  # one call per shared scale
    assert counted["scalar"].calls == [0.7]  # a lone scale: the scalar measurement
    for x in out:  # every draw on the release path's 2^k output grid (§9.1)
        assert (Fraction(x) / Fraction(TINY)).denominator == 1


def test_refuses_bad_scales_and_lengths() -> None:
    src = OpenDPNoise()
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="scale must be finite"):
            src.laplace_many([0.0, 0.0], [1.0, bad])
    with pytest.raises(ValueError, match="one scale per value"):
        src.laplace_many([0.0, 0.0], [1.0])
    assert src.laplace_many([], []) == []


def test_vector_measurement_maps_a_coordinate_as_the_scalar_one() -> None:
    """A one-coordinate vector measurement has the scalar one's map at the calibrated scale
    and the next float down, and certifies the scale; on n coordinates the rounding slack is
    paid n times (which the per-grid accounting of §6.1 never uses: §9.4.7)."""
    for sens, eps in ((1.0, 3.0), (30.0, 0.7), (0.1, 0.3), (2.5, 0.1), (0.37, 0.049)):
        scale = calibrate_scale(sens, eps)
        for s in (scale, math.nextafter(scale, 0.0)):
            one = noise_mod._make_laplace_vector((s, 1)).map(sens)
            assert one == noise_mod._make_laplace(s).map(sens)
        assert noise_mod._make_laplace_vector((scale, 1)).map(sens) <= eps
        slack = noise_mod.ROUNDING_SLACK
        for n in (1, 5):
            got = noise_mod._make_laplace_vector((scale, n)).map(0.0)
            assert Fraction(got) >= n * slack / Fraction(scale)
            assert got == pytest.approx(float(n * slack / Fraction(scale)), rel=1e-12)


def test_batched_draws_follow_the_laplace_law_at_their_own_scale() -> None:
    """Two interleaved scales (5x apart) and values: each coordinate's noise must be
    Lap(its own scale) around its own value (a mix-up of indices would fail), and the
    batched draws must have the law of the scalar production draws."""
    n = 1500
    values = np.where(np.arange(2 * n) % 2 == 0, 3.0, -7.0)
    scales = np.where(np.arange(2 * n) % 2 == 0, 1.3, 6.5)

    def laws() -> dict[str, float]:
        out = np.asarray(OpenDPNoise().laplace_many(values.tolist(), scales.tolist()))
        p = {}
        for parity, value, scale in ((0, 3.0, 1.3), (1, -7.0, 6.5)):
            noise = out[parity::2] - value
            p[f"KS at {scale}"] = stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue
        scalar = np.array([OpenDPNoise().laplace(3.0, 1.3) for _ in range(n)])
        p["as the scalar draws"] = stats.ks_2samp(out[0::2], scalar).pvalue
        # independent coordinates: the correlation of neighbours is about N(0, 1/n)
        a = out[0::2] - 3.0
        r = np.corrcoef(a[:-1], a[1:])[0, 1]
        p["correlation"] = 2.0 * stats.norm.sf(abs(r) * math.sqrt(n - 1))
        return p

    laws_hold(laws)


def test_sources_without_a_batch_draw_one_at_a_time() -> None:
    a, b = SeededNoise(np.random.default_rng(5)), SeededNoise(np.random.default_rng(5))
    got = laplace_many(a, [1.0, 2.0, 3.0], [0.5, 0.0, 2.0])
    assert got == [b.laplace(1.0, 0.5), b.laplace(2.0, 0.0), b.laplace(3.0, 2.0)]


def _grid(seed: int) -> GridData:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 9, size=40)
    return GridData.from_counts_and_values(counts, rng.uniform(0, 30.0, int(counts.sum())))


@pytest.mark.parametrize(
    ("statistic", "mechanism"),
    [
        ("mean", "auto"),
        ("mean", "user_window"),
        ("mean", "centred_clip"),
        ("mean", "clip"),
        ("mean", "levy"),
        ("variance", "auto"),
        ("variance", "window"),
        ("variance", "centred"),
        ("variance", "clip"),
    ],
)
def test_two_step_release_is_the_estimator_plus_one_laplace_draw(
    statistic: str, mechanism: str
) -> None:
    """With the same seeded source, ``release_mean`` / ``release_variance`` (and the
    two steps they are made of) must return exactly what the mechanism's estimator
    followed by one scalar Laplace draw at the calibrated scale returns: the one engine
    path adds nothing and draws nothing else."""
    grid = _grid(3)
    caps = np.where(np.arange(40) % 7 == 0, 0, 5)
    fn = release_mean if statistic == "mean" else release_variance
    for eps in (0.3, 4.0):
        one = fn(grid, 30.0, eps, mechanism, caps=caps, noise=SeededNoise(np.random.default_rng(1)))
        src = SeededNoise(np.random.default_rng(1))
        (started,) = start_releases((statistic,), grid, 30.0, eps, mechanism, caps=caps, noise=src)
        (two,) = finish_releases([started], noise=src)
        ref = SeededNoise(np.random.default_rng(1))
        info = prepare_counts(grid.counts, caps)
        draft = registry.draft(statistic, info, 30.0, eps, mechanism, {})
        est = draft.estimator(grid, ref)
        scale = calibrate_scale(est.sensitivity, draft.eps_noise)
        lo, hi = statistic_range(statistic, 30.0)
        expected = min(max(ref.laplace(est.value, scale), lo), hi)  # the answer's range
        for got in (one, two):
            assert got.estimate == expected and got.noise_scale == scale
            assert got.sensitivity == est.sensitivity and got.mechanism == draft.mechanism
            assert dict(got.details) == {**draft.details, **est.details}
            assert got.kept.tolist() == draft.kept.tolist()
        assert one.ci95 == two.ci95 and one.ci95_note == two.ci95_note


def test_start_releases_refuses_an_unknown_statistic() -> None:
    with pytest.raises(ValueError, match="unknown statistic"):
        start_releases(("median",), _grid(1), 30.0, 1.0)
