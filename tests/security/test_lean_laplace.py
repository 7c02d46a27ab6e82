"""Audit of the lean Laplace invocations, scalar and vector (app/core/noise/noisy_max_invoke.py,
docs/math.md §9.4.7–§9.4.8) and of the draws shared between two threads.

A slot release draws its Laplace noise through ``OpenDPNoise.laplace_many``: one call of
OpenDP's vector ``make_laplace`` per shared scale, the array handed over as its own
buffer (``invoke_vector``), the calls split between two threads. Each output coordinate
must be its own value plus Laplace noise at its own scale, independent of the others.
No seed can be fixed for OpenDP's sampler: Kolmogorov-Smirnov tests at alpha = 1e-4 in
all, failing only when two independent samples both reject (:mod:`tests.unseeded`: a
correct sampler fails with probability 1e-8). A broken copy (the answers of a
group handed back in reverse order: a mix-up of positions) must fail the same test.
"""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import pytest
from scipy import stats

from app.core.noise import laplace as noise_mod
from app.core.noise.laplace import OpenDPNoise
from app.core.noise.noisy_max_invoke import invoke_scalar, invoke_vector
from tests.unseeded import laws_hold

N = 4000


def test_the_lean_vector_path_is_in_use_and_matches_opendp_without_noise() -> None:
    assert noise_mod._LEAN
    rng = np.random.default_rng(4)
    for size in (1, 2, 7, 300):
        values = rng.uniform(-50.0, 50.0, size)
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size)
        meas = dp.m.make_laplace(domain, dp.l1_distance(T=float), 0.0, k=noise_mod.LAPLACE_K)
        assert invoke_vector(meas, values).tolist() == meas(values.tolist())
    assert invoke_vector(meas, np.zeros(0)).size == 0


def _noise(out: list[float], values: np.ndarray, scales: np.ndarray, scale: float) -> np.ndarray:
    mine = scales == scale
    return np.asarray(out)[mine] - values[mine]


def _draws() -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Distinct values, three scales interleaved (many groups for both threads)."""
    values = np.arange(3 * N, dtype=np.float64) * 0.25
    scales = np.tile([0.5, 2.0, 9.0], N)
    return values, scales, OpenDPNoise().laplace_many(values.tolist(), scales.tolist())


def _laws() -> dict[str, float]:
    values, scales, out = _draws()
    p_values = {}
    for scale in (0.5, 2.0, 9.0):
        noise = _noise(out, values, scales, scale)
        p_values[f"KS at {scale}"] = stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue
        # neighbours independent: their correlation is about N(0, 1/N)
        r = np.corrcoef(noise[:-1], noise[1:])[0, 1]
        p_values[f"correlation at {scale}"] = 2.0 * stats.norm.sf(abs(r) * np.sqrt(N - 1))
    return p_values


def test_each_coordinate_is_its_value_plus_laplace_at_its_scale() -> None:
    laws_hold(_laws)


def test_many_scales_are_shared_between_the_two_threads_and_all_drawn() -> None:
    """300 scales (groups split between the threads): every draw noisy, at its own scale."""
    scales = np.repeat(np.linspace(1.0, 3.0, 300), 20)

    def law() -> dict[str, float]:
        out = np.asarray(OpenDPNoise().laplace_many([0.0] * scales.size, scales.tolist()))
        assert np.count_nonzero(out == 0.0) == 0
        return {"KS": stats.kstest(out / scales, stats.laplace().cdf).pvalue}

    laws_hold(law)


def test_a_broken_copy_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def reversed_answers(meas: dp.Measurement, values: np.ndarray) -> np.ndarray:
        return invoke_vector(meas, values)[::-1]

    monkeypatch.setattr(noise_mod, "invoke_vector", reversed_answers)
    values, scales, out = _draws()
    noise = _noise(out, values, scales, 0.5)
    assert stats.kstest(noise, stats.laplace(scale=0.5).cdf).pvalue < 1e-12


def test_the_lean_scalar_path_matches_opendp_without_noise() -> None:
    meas = dp.m.make_laplace(
        dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), 0.0,
        k=noise_mod.LAPLACE_K,
    )  # fmt: skip
    for value in (0.0, -3.5, 0.1, 29.999, 2.0**-60, 1e300):
        assert invoke_scalar(meas, value) == meas(value)


def _scalar_law(draw: object) -> dict[str, float]:
    """A query's single draws (the scalar path): value plus Laplace at the scale."""
    noise = np.array([draw(7.25, 1.5) for _ in range(N)]) - 7.25  # type: ignore[operator]
    return {"KS": stats.kstest(noise, stats.laplace(scale=1.5).cdf).pvalue}


def test_a_single_draw_is_its_value_plus_laplace_at_its_scale() -> None:
    source = OpenDPNoise()
    laws_hold(lambda: _scalar_law(lambda v, s: source.laplace_many([v], [s])[0]))
    laws_hold(lambda: _scalar_law(source.laplace))


def test_a_broken_scalar_copy_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def doubled(meas: dp.Measurement, value: float) -> float:  # the noise's scale doubled
        return 2.0 * invoke_scalar(meas, value) - value

    monkeypatch.setattr(noise_mod, "invoke_scalar", doubled)
    assert _scalar_law(OpenDPNoise().laplace)["KS"] < 1e-12
