"""The engine's estimates, kept sets, bounds, caps and auto (its interface:
test_engine_interface.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog, minimize

from app.core import (
    MEAN_MECHANISMS,
    GridData,
    plan_mean,
    plan_variance,
    release_mean,
    release_variance,
)
from app.core.mechanisms.bounds import (
    mean_clip_bias,
    mean_sensitivity,
    variance_clip_bias,
    variance_sensitivity,
)
from tests.unit.core.helpers import BOUNDED, U, ZeroNoise, random_grid

LINEAR = [
    "baseline",
    "array_avg_wrap",
    "array_avg_bestfit",
    "opt_array",
    "opt_array_convex",
    "clip",
]


def _noiseless(grid: GridData, mechanism: str, eps: float = 1.0, **kw: object) -> float:
    return release_mean(grid, U, eps, mechanism, noise=ZeroNoise(), **kw).estimate


# ------------------------------------------------------------------- estimates
def test_plain_estimates() -> None:
    grid = GridData.from_user_values([[1.0, 2.0, 3.0], [10.0], [4.0, 8.0]])
    values = np.array([1, 2, 3, 10, 4, 8.0])
    assert _noiseless(grid, "baseline") == pytest.approx(values.mean())
    assert _noiseless(grid, "clip", m=1) == pytest.approx(np.mean([1, 10, 4]))
    assert _noiseless(grid, "clip", m=2) == pytest.approx(np.mean([1, 2, 10, 4, 8]))
    var = release_variance(grid, U, 1.0, "baseline", noise=ZeroNoise()).estimate
    assert var == pytest.approx(values.var())
    var = release_variance(grid, U, 1.0, "clip", m=2, noise=ZeroNoise()).estimate
    assert var == pytest.approx(np.var([1, 2, 10, 4, 8]))


def _array_average(grid: GridData, arrays: list[list[tuple[int, int]]], fill: bool) -> float:
    """Average of array means; an array is a list of (user, records placed)."""
    means = []
    for arr in arrays:
        total = 0.0
        for u, r in arr:
            vals = grid.values[grid.offsets[u] : grid.offsets[u + 1]]
            total += r * vals.mean() if fill else vals[:r].sum()
        means.append(total / sum(r for _, r in arr))
    return float(np.mean(means))


def test_bestfit_estimate_by_hand() -> None:
    """counts [5, 1, 3, 2], m_UB = 3: users 0 -> A1 (3), 2 -> A2 (3), 3 -> A3 (2), 1 -> A3."""
    rng = np.random.default_rng(0)
    grid = GridData.from_counts_and_values([5, 1, 3, 2], rng.uniform(0, U, 11))
    arrays = [[(0, 3)], [(2, 3)], [(3, 2), (1, 1)]]
    for fill in (False, True):
        got = _noiseless(grid, "array_avg_bestfit", m_ub=3, user_mean_fill=fill)
        assert got == pytest.approx(_array_average(grid, arrays, fill))
    plan = plan_mean(grid.counts, U, 1.0, "array_avg_bestfit", m_ub=3)
    assert plan.sensitivity == pytest.approx(U / 3)
    assert plan.details["K_bar"] == 3


def test_wraparound_estimate_by_hand() -> None:
    """counts [5, 1, 3, 2], m_UB = 3: records 3 + 3 + 2 + 1 = 9 -> K = 3 full arrays."""
    rng = np.random.default_rng(1)
    grid = GridData.from_counts_and_values([5, 1, 3, 2], rng.uniform(0, U, 11))
    arrays = [[(0, 3)], [(2, 3)], [(3, 2), (1, 1)]]
    got = _noiseless(grid, "array_avg_wrap", m_ub=3, user_mean_fill=False)
    assert got == pytest.approx(_array_average(grid, arrays, False))
    plan = plan_mean(grid.counts, U, 1.0, "array_avg_wrap", m_ub=3)
    assert plan.details["K"] == 3 and plan.sensitivity == pytest.approx(2 * U / 3)
    # m_UB = 2: 2 + 2 + 2 + 1 = 7 records -> K = 3, user 1's record is dropped
    plan = plan_mean(grid.counts, U, 1.0, "array_avg_wrap", m_ub=2, user_mean_fill=False)
    assert plan.details["K"] == 3 and plan.kept.tolist() == [2, 0, 2, 2]


def test_worst_case_optimal_by_hand() -> None:
    grid = GridData.from_user_values([[60.0, 64.0, 50.0, 1.0], [3.0], [30.0, 65.0]])
    eps = 1.0  # ceil(2/eps) = 2 -> T = second largest of {4U, U, 2U} = 2U
    T = 2 * U
    plan = plan_mean(grid.counts, U, eps, "worst_case_optimal")
    assert plan.details["T"] == pytest.approx(T)
    lo = [max((U * m - T) / (2 * m), 0) for m in (4, 1, 2)]
    hi = [min((U * m + T) / (2 * m), U) for m in (4, 1, 2)]
    per_record = np.concatenate(
        [
            np.clip([60, 64, 50, 1], lo[0], hi[0]),
            np.clip([3], lo[1], hi[1]),
            np.clip([30, 65], lo[2], hi[2]),
        ]
    )
    got = _noiseless(grid, "worst_case_optimal", eps, user_mean_fill=False)
    assert got == pytest.approx(per_record.mean())
    means = [np.mean([60, 64, 50, 1]), 3.0, 47.5]
    filled = (
        sum(m * np.clip(mu, a, b) for m, mu, a, b in zip((4, 1, 2), means, lo, hi, strict=True)) / 7
    )
    assert _noiseless(grid, "worst_case_optimal", eps) == pytest.approx(filled)
    assert plan.sensitivity == pytest.approx(T / 7)
    bias = sum(max((U * m - T) / 2, 0) for m in (4, 1, 2)) / 7
    assert plan.worst_case_bias == pytest.approx(bias)
    assert plan.worst_case_error == pytest.approx(bias + T / (7 * eps))


def test_worst_case_optimal_without_threshold() -> None:
    """ceil(2/ε) > L gives T = 0: estimate U/2 whatever the values, no noise, nobody used."""
    grid = GridData.from_user_values([[1.0, 2.0], [3.0]])
    rel = release_mean(grid, U, 0.5, "worst_case_optimal")
    assert rel.estimate == U / 2 and rel.noise_scale == 0 and rel.sensitivity == 0
    assert rel.kept.tolist() == [0, 0]
    assert rel.worst_case_error == pytest.approx(U / 2)
    # U/2 ± (0 + worst-case bias U/2) is all of [0, U]: published, and a note says so
    assert rel.ci95 == (0.0, U) and "whole range" in (rel.ci95_note or "")


# ---------------------------------------------------------------- kept records
@pytest.mark.parametrize(
    "mechanism",
    ["clip", "array_avg_bestfit", "array_avg_wrap", "opt_array", "worst_case_optimal", "baseline"],
)
def test_records_outside_the_kept_heads_are_never_read(mechanism: str) -> None:
    """Changing any value beyond a user's kept head (or of an unused user) changes nothing."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        grid = random_grid(rng, U, n_users=7, max_count=12)
        caps = rng.integers(0, 12, size=7)
        caps[0] = 12
        kw: dict[str, object] = (
            {"user_mean_fill": False}
            if mechanism
            in ("array_avg_bestfit", "array_avg_wrap", "opt_array", "worst_case_optimal")
            else {}
        )
        rel = release_mean(grid, U, 1.0, mechanism, caps=caps, noise=ZeroNoise(), **kw)
        assert np.all(rel.kept <= np.minimum(grid.counts, caps))
        assert np.all(rel.kept[caps == 0] == 0)
        values = grid.values.copy()
        outside = grid.record_rank >= rel.kept[grid.record_user]
        values[outside] = rng.uniform(0, U, size=int(outside.sum()))
        other = GridData(values=values, offsets=grid.offsets)
        again = release_mean(other, U, 1.0, mechanism, caps=caps, noise=ZeroNoise(), **kw)
        assert again.estimate == pytest.approx(rel.estimate, abs=1e-9)


def test_clip_keeps_the_earliest_records_and_caps() -> None:
    counts = np.array([9, 4, 1, 6])
    caps = np.array([3, 0, 5, 6])
    plan = plan_mean(counts, U, 1.0, "clip", caps=caps, m=5)
    assert plan.kept.tolist() == [3, 0, 1, 5]
    n = int(counts.sum())
    assert plan.worst_case_bias == pytest.approx(mean_clip_bias(U, 9, n))
    assert plan.sensitivity == pytest.approx(mean_sensitivity(U, 5, 9))
    # the optimised m lies in [min positive capped count, max capped count]
    auto_m = plan_mean(counts, U, 1.0, "clip", caps=caps).details["m"]
    assert 1 <= auto_m <= 6


def test_no_record_left_is_an_error() -> None:
    with pytest.raises(ValueError, match="no record"):
        plan_mean([3, 2], U, 1.0, "baseline", caps=[0, 0])


# -------------------------------------------------------- worst-case bias: true
def _weights(grid: GridData, fn: object) -> np.ndarray:
    """Probe a linear estimator with unit vectors (and check it is linear)."""
    n = grid.n_records
    base = fn(np.zeros(n))  # type: ignore[operator]
    w = np.array([fn(U * np.eye(n)[j]) - base for j in range(n)]) / U  # type: ignore[operator]
    x = np.random.default_rng(0).uniform(0, U, n)
    assert fn(x) == pytest.approx(base + w @ x)  # type: ignore[operator]
    assert base == pytest.approx(0.0, abs=1e-12)
    return w


@pytest.mark.parametrize("mechanism", LINEAR)
@pytest.mark.parametrize("fill", [False, True])
@pytest.mark.parametrize("capped", [False, True])
def test_linear_bias_is_the_exact_worst_case(mechanism: str, fill: bool, capped: bool) -> None:
    """Black box: weights probed from the release path, then max |Σ w x - mean| by an LP."""
    rng = np.random.default_rng(hash((mechanism, fill, capped)) % 2**32)
    for _ in range(4):
        grid = random_grid(rng, U, n_users=5, max_count=7)
        caps = rng.integers(0, 8, size=5) if capped else None
        if caps is not None:
            caps[int(np.argmax(grid.counts))] = 99
        kw: dict[str, object] = {}
        if "user_mean_fill" in MEAN_MECHANISMS[mechanism].options:
            kw["user_mean_fill"] = fill
        elif fill:
            continue

        def estimate(
            x: np.ndarray,
            caps: np.ndarray | None = caps,
            offsets: np.ndarray = grid.offsets,
            kw: dict[str, object] = kw,
        ) -> float:
            g = GridData(values=x, offsets=offsets)
            return release_mean(g, U, 1.0, mechanism, caps=caps, noise=ZeroNoise(), **kw).estimate

        w = _weights(grid, estimate)
        c = w - 1.0 / grid.n_records
        bounds = [(0, U)] * grid.n_records
        worst = max(-linprog(-c, bounds=bounds).fun, -linprog(c, bounds=bounds).fun)
        plan = plan_mean(grid.counts, U, 1.0, mechanism, caps=caps, **kw)
        assert plan.worst_case_bias == pytest.approx(worst, abs=1e-7)


def _wco_bias_check(capped: bool, rounds: int, seed: int) -> None:
    """Nonlinear: Powell on the black box never beats the reported bias; tight uncapped."""
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        grid = random_grid(rng, U, n_users=4, max_count=6)
        caps = rng.integers(0, 6, size=4) if capped else None
        if caps is not None:
            caps[int(np.argmax(grid.counts))] = 9
        plan = plan_mean(grid.counts, U, 2.0, "worst_case_optimal", caps=caps)

        def gap(
            x: np.ndarray,
            sign: float,
            caps: np.ndarray | None = caps,
            offsets: np.ndarray = grid.offsets,
        ) -> float:
            g = GridData(values=np.clip(x, 0, U), offsets=offsets)
            est = release_mean(
                g, U, 2.0, "worst_case_optimal", caps=caps, noise=ZeroNoise()
            ).estimate
            return -sign * (est - g.values.mean())

        found = 0.0
        starts = [rng.uniform(0, U, grid.n_records)]
        starts += [np.zeros(grid.n_records), np.full(grid.n_records, U)]
        for sign in (1.0, -1.0):
            for x0 in starts:
                res = minimize(
                    gap, x0, args=(sign,), method="Powell", bounds=[(0, U)] * grid.n_records
                )
                found = max(found, -res.fun)
        assert found <= plan.worst_case_bias + 1e-9
        if not capped:
            assert found == pytest.approx(plan.worst_case_bias, abs=1e-3)


@pytest.mark.parametrize("capped", [False, True])
def test_worst_case_optimal_bias_bounds_the_brute_force(capped: bool) -> None:
    _wco_bias_check(capped, rounds=1, seed=21)


@pytest.mark.slow
@pytest.mark.parametrize("capped", [False, True])
def test_worst_case_optimal_bias_bounds_the_brute_force_extended(capped: bool) -> None:
    _wco_bias_check(capped, rounds=6, seed=22)


# ------------------------------------------------------------ plan vs release
@pytest.mark.parametrize("mechanism", BOUNDED)
def test_plan_and_release_agree(mechanism: str) -> None:
    grid = random_grid(np.random.default_rng(4), U, n_users=25, max_count=30)
    caps = np.where(np.arange(25) % 5 == 0, 3, 99)
    plan = plan_mean(grid.counts, U, 0.8, mechanism, caps=caps)
    rel = release_mean(grid, U, 0.8, mechanism, caps=caps, noise=ZeroNoise())
    assert rel.mechanism == plan.mechanism != "auto"
    assert np.array_equal(rel.kept, plan.kept)
    for field in ("sensitivity", "noise_scale", "worst_case_bias", "worst_case_error"):
        assert getattr(rel, field) == pytest.approx(getattr(plan, field))
    # the interval allows for the worst-case bias, then is projected onto [0, U]
    half = rel.noise_scale * np.log(20) + rel.worst_case_bias
    want = (max(0.0, rel.estimate - half), min(U, rel.estimate + half))
    assert rel.ci95 == pytest.approx(want)
    assert (rel.ci95_note is not None) == (want == (0.0, U))  # a note on the whole range


@pytest.mark.parametrize("eps", [0.01, 0.2, 1.0, 5.0])
def test_auto_follows_its_public_rule(eps: float) -> None:
    counts = np.array([417, 200, 46, 46, 30, 5, 1, 1, 1, 80] * 10)
    for n_users in (10, 100):
        auto = plan_mean(counts[:n_users], U, eps)
        gate = 0.4 * eps * n_users >= 4 * (np.log(257) + 3) and np.median(counts[:n_users]) >= 4
        assert auto.mechanism == ("centred_clip" if gate else "user_window")
        assert auto.details["selected_by"] == "auto"
        grid = random_grid(np.random.default_rng(5), U, n_users=n_users, max_count=30)
        rel = release_mean(grid, U, eps, noise=ZeroNoise())
        assert rel.mechanism == plan_mean(grid.counts, U, eps).mechanism
        assert np.array_equal(rel.kept, grid.counts)
    for n_users in (10, 100):
        c = counts[:n_users]
        gate = 0.4 * eps * n_users >= 4 * (np.log(33) + 3) and np.median(c) >= 4
        assert plan_variance(c, U, eps).mechanism == ("centred" if gate else "window")
    assert plan_variance(np.ones(500, dtype=int), U, 5.0).mechanism == "window"  # median 1
    assert plan_mean(np.ones(500, dtype=int), U, 5.0).mechanism == "user_window"  # median 1


def test_clip_m_minimises_the_error_over_integers() -> None:
    counts = np.array([417, 200, 46, 46, 30, 5, 2, 1, 1, 80])
    n = int(counts.sum())
    for eps in (0.05, 0.5, 3.0):

        def mean_err(m: int, eps: float = eps) -> float:
            s = int(np.minimum(counts, m).sum())
            return mean_clip_bias(U, s, n) + mean_sensitivity(U, m, s) / eps

        def var_err(m: int, eps: float = eps) -> float:
            s = int(np.minimum(counts, m).sum())
            return variance_clip_bias(U, s, n) + variance_sensitivity(U, m, s) / eps

        for err, plan in (
            (mean_err, plan_mean(counts, U, eps, "clip")),
            (var_err, plan_variance(counts, U, eps, "clip")),
        ):
            values = {m: err(m) for m in range(1, 418)}
            m = plan.details["m"]
            assert values[m] == pytest.approx(min(values.values()))
            assert all(values[k] > values[m] for k in values if k < m)


# ----------------------------------------------------------------- joint
