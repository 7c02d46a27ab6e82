"""centred_clip (app/core/mechanisms/mean_centred.py): options, gate, plan, exact
sensitivity, draws."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy.optimize import minimize

from app.core import GridData, plan_mean, release_mean, validate_options
from app.core.mechanisms import mean_centred as mc
from app.core.mechanisms.float_sums import float_sum_sensitivity
from app.core.noise.laplace import calibrate_scale
from tests.unit.core.helpers import ZeroNoise

U = 65.0
NAME = "centred_clip"


class Counting(ZeroNoise):
    """ZeroNoise that also counts the private choices."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.choices = 0

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        self.choices += 1
        return super().noisy_max(scores, epsilon, sensitivity=sensitivity)


def _grid(seed: int, L: int = 300, max_count: int = 40) -> GridData:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, max_count + 1, size=L)
    values = np.clip(rng.normal(20.0, 8.0, size=int(counts.sum())), 0.0, U)
    return GridData.from_counts_and_values(counts, values)


def test_options_defaults_and_validation() -> None:
    assert validate_options("mean", NAME, {}) == {
        "centre_share": 0.4, "width_share": 0.2, "width_factor": 0.5,
    }  # fmt: skip
    assert validate_options("mean", NAME, {"centre_share": "0.3"})["centre_share"] == 0.3
    for bad in ({"centre_share": 0}, {"width_share": 1}, {"width_factor": 0}, {"m_ub": 3}):
        with pytest.raises(ValueError, match="option"):
            validate_options("mean", NAME, bad)
    with pytest.raises(ValueError, match="below 1"):
        plan_mean([5] * 100, U, 1.0, NAME, centre_share=0.6, width_share=0.4)


def test_gate_is_public_and_matches_its_formula() -> None:
    need = 4 * (math.log(257) + 3)
    assert mc.adaptive_gate(217, 0.2) and need <= 217 * 0.2
    assert not mc.adaptive_gate(34, 0.8) and need > 34 * 0.8
    assert plan_mean([3] * 217, U, 0.5, NAME).details["path"] == "adaptive"
    assert plan_mean([3] * 217, U, 0.3, NAME).details["path"].startswith("worst_case_optimal")


def test_plan_fields_adaptive_path() -> None:
    counts = np.array([40, 7, 0, 3, *([5] * 110)])
    plan = plan_mean(counts, U, 1.0, NAME)
    assert plan.mechanism == NAME and plan.epsilon == 1.0
    assert plan.sensitivity is None and plan.noise_scale is None
    assert plan.worst_case_bias is None and plan.worst_case_error is None
    assert np.array_equal(plan.kept, counts)  # everyone with records is used and charged
    d = plan.details
    assert d["eps_centre"] + d["eps_width"] + d["eps_noise"] <= 1.0
    assert d["eps_noise"] == pytest.approx(0.4)
    capped = plan_mean(counts, U, 1.0, NAME, caps=np.minimum(counts, 4))
    assert np.array_equal(capped.kept, np.minimum(counts, 4))


def test_fallback_is_worst_case_optimal() -> None:
    counts = np.array([10, 3, 1, 1, 2])  # L = 5: the gate fails
    plan, wco = plan_mean(counts, U, 1.0, NAME), plan_mean(counts, U, 1.0, "worst_case_optimal")
    assert plan.sensitivity == wco.sensitivity and plan.noise_scale == wco.noise_scale
    assert plan.worst_case_bias == wco.worst_case_bias
    assert plan.worst_case_error == wco.worst_case_error
    grid = GridData.from_counts_and_values(counts, np.linspace(0, U, int(counts.sum())))
    a = release_mean(grid, U, 1.0, NAME, noise=ZeroNoise())
    b = release_mean(grid, U, 1.0, "worst_case_optimal", noise=ZeroNoise())
    assert a.estimate == b.estimate and a.mechanism == NAME


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_release_reports_the_window_it_used(seed: int, eps: float) -> None:
    grid = _grid(seed)
    noise = Counting(seed)
    rel = release_mean(grid, U, eps, NAME, noise=noise)
    assert noise.choices == 2 and len(noise.scales) == 1  # centre, width, then one Laplace
    d = rel.details
    c, R = d["centre"], d["half_width"]
    assert 0.0 <= c <= U and R > 0
    m = grid.counts.astype(float)
    lo, hi = mc.centred_window(m, U, c, R)
    sums = grid.head_sums(grid.counts)
    n = m.sum()
    assert rel.estimate == pytest.approx(np.clip(sums, lo, hi).sum() / n, rel=1e-12)
    assert 0.0 <= rel.estimate <= U
    # the real-number sensitivity plus what the two roundings of the sum can add
    assert rel.sensitivity == float_sum_sensitivity(float((hi - lo).max() / n), U)
    assert (hi - lo).max() / n < rel.sensitivity <= 2 * R / n + 4 * math.ulp(2 * U)
    assert rel.noise_scale == calibrate_scale(rel.sensitivity, d["eps_noise"])
    assert rel.noise_scale == pytest.approx(rel.sensitivity / (0.4 * eps), rel=1e-12)
    assert rel.worst_case_bias is None and rel.worst_case_error is None
    assert rel.ci95 is not None and rel.ci95[0] <= float(grid.values.mean()) <= rel.ci95[1]


def _term_gap(x: np.ndarray, m_l: int, lo: float, hi: float) -> float:
    return float(np.clip(x[:m_l].sum(), lo, hi) - np.clip(x[m_l:].sum(), lo, hi))


@pytest.mark.parametrize("c", [0.0, 9.0, 30.0, 65.0])
@pytest.mark.parametrize("R", [4.0, 50.0, 400.0])
def test_sensitivity_matches_bruteforce(c: float, R: float) -> None:
    """For released (c, R): max over the box [0,U]^n of |θ(D) - θ(D')|, D and D' differing
    in one user's values, equals max_l (hi_l - lo_l)/n. Other users' terms cancel, so
    the search is over the changed user's two value vectors (corners and L-BFGS-B)."""
    counts = np.array([6, 1, 3, 2])
    n = counts.sum()
    lo, hi = mc.centred_window(counts, U, c, R)
    rng = np.random.default_rng(int(c + R))
    best = 0.0
    for ml, a, b in zip(counts, lo, hi, strict=True):
        dim = 2 * int(ml)
        starts = [np.r_[np.full(ml, U), np.zeros(ml)]]
        starts += [rng.uniform(0, U, dim) for _ in range(5)]
        for z in starts:
            res = minimize(
                lambda v, ml=ml, a=a, b=b: -_term_gap(v, int(ml), a, b), z, method="L-BFGS-B",
                bounds=[(0.0, U)] * dim,
            )  # fmt: skip
            best = max(best, -float(res.fun), _term_gap(z, int(ml), a, b))
    assert best / n == pytest.approx((hi - lo).max() / n, abs=1e-9)


def test_scores_have_sensitivity_one_and_the_width_counts_are_monotone() -> None:
    rng = np.random.default_rng(3)
    cands = mc.centre_candidates(U)
    for _ in range(200):
        m = rng.integers(1, 6, size=int(rng.integers(1, 30))).astype(np.float64)
        v = rng.uniform(0, U, size=m.size) * m
        w = v.copy()
        w[int(rng.integers(v.size))] = rng.choice([0.0, U, rng.uniform(0, U)]) * m[0]
        w = np.clip(w, 0.0, U * m)
        assert np.abs(mc.centre_utility(v / m, cands) - mc.centre_utility(w / m, cands)).max() <= 1
        R = mc.half_widths(U, int(m.max()), 0.5)
        c = float(rng.choice(cands))
        moved = mc.clipped_counts(w, m, U, c, R) - mc.clipped_counts(v, m, U, c, R)
        assert np.abs(moved).max() <= 1 and (np.all(moved >= 0) or np.all(moved <= 0))


def test_candidates_cover_the_possible_residuals() -> None:
    rc = mc.width_candidates(U, 417)
    assert rc[0] == pytest.approx(U / 256) and rc[-1] >= U * math.sqrt(417) > rc[-2]
    assert mc.centre_candidates(U)[[0, -1]].tolist() == [0.0, U]
    R = mc.half_widths(U, 417, 0.5)
    assert R[-1] == U * 417 and np.all(np.diff(R) > 0)


@pytest.mark.parametrize("values", [[0.0], [U], [12.5]])
def test_one_user(values: list[float]) -> None:
    grid = GridData.from_user_values([values * 7])
    small = release_mean(grid, U, 1.0, NAME, noise=ZeroNoise())  # gate fails: wco
    assert small.details["path"].startswith("worst_case_optimal")
    big = release_mean(grid, U, 200.0, NAME, noise=Counting())  # 0.4·200·1 >= 34.2
    assert big.details["path"] == "adaptive"
    assert 0.0 <= big.estimate <= U and big.sensitivity > 0
    assert big.sensitivity <= 2 * big.details["half_width"] / 7 + 4 * math.ulp(2 * U)


def test_all_counts_one_and_constant_values() -> None:
    rng = np.random.default_rng(4)
    grid = GridData.from_user_values([[x] for x in np.clip(rng.normal(20, 5, 300), 0, U)])
    rel = release_mean(grid, U, 1.0, NAME, noise=Counting(1))
    assert rel.details["path"] == "adaptive"
    assert abs(rel.estimate - grid.values.mean()) < 3.0
    assert rel.sensitivity <= 2 * rel.details["half_width"] / 300 + 4 * math.ulp(2 * U)
    for value in (0.0, U):  # every value at one end of [0, U]
        flat = GridData.from_user_values([[value] * 4 for _ in range(100)])
        out = release_mean(flat, U, 1.0, NAME, noise=Counting(2))
        assert 0.0 <= out.estimate <= U


def test_seeded_releases_are_reproducible_and_accurate_on_concentrated_data() -> None:
    from research.noise import SeededNoise

    grid = _grid(9, L=217, max_count=60)
    mu = float(grid.values.mean())
    est = [
        release_mean(grid, U, 1.0, NAME, noise=SeededNoise(np.random.default_rng(s))).estimate
        for s in range(200)
    ]
    again = release_mean(grid, U, 1.0, NAME, noise=SeededNoise(np.random.default_rng(0)))
    assert again.estimate == est[0]
    base = plan_mean(grid.counts, U, 1.0, "baseline").noise_scale
    assert np.mean(np.abs(np.array(est) - mu)) < base / 4
