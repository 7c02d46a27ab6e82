"""``capped_weights`` (docs/math.md §5.12) against brute force: its sensitivity and
worst-case bias over every dataset at the corners of ``[0, U]`` (the estimator is linear,
so both extremes are reached there), and its ``k`` against every ``k`` tried."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from app.core import GridData, plan_mean, release_mean
from app.core.data.counts import prepare_counts
from app.core.mechanisms.mean_capped import capped_half_widths, interval_k
from tests.unit.core.helpers import ZeroNoise

U = 7.0
CASES = [([3, 1, 2], None), ([4, 1, 1, 2], None), ([5, 2, 1], [2, 2, 1]), ([1, 1, 6], None)]


def _datasets(counts: list[int]) -> list[list[list[float]]]:
    """Every dataset whose records are all at 0 or U (user by user)."""
    per_user = [list(itertools.product((0.0, U), repeat=m)) for m in counts]
    return [[list(u) for u in combo] for combo in itertools.product(*per_user)]


@pytest.mark.parametrize(("counts", "caps"), CASES)
@pytest.mark.parametrize("k", [1, 2, None])
def test_sensitivity_and_bias_are_exact(counts: list[int], caps: list[int] | None, k: int | None):
    plan = plan_mean(counts, U, 1.0, "capped_weights", caps=caps, k=k)
    est, bias = {}, 0.0
    for users in _datasets(counts):
        grid = GridData.from_user_values(users)
        rel = release_mean(grid, U, 1.0, "capped_weights", caps=caps, k=k, noise=ZeroNoise())
        est[tuple(map(tuple, users))] = rel.estimate
        bias = max(bias, abs(float(np.mean(grid.values)) - rel.estimate))
    sens = 0.0
    for a, b in itertools.combinations(est, 2):
        if sum(x != y for x, y in zip(a, b, strict=True)) == 1:  # one user's values differ
            sens = max(sens, abs(est[a] - est[b]))
    assert sens == pytest.approx(plan.sensitivity, rel=1e-12)
    assert sens <= plan.sensitivity  # the declared one allows for the float roundings
    assert bias == pytest.approx(plan.worst_case_bias, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_interval_k_is_the_narrowest_among_every_k(seed: int) -> None:
    rng = np.random.default_rng(seed)
    info = prepare_counts(rng.integers(1, 30, size=40))
    eps = float(rng.choice([0.5, 1.0, 2.0]))
    k = interval_k(info, 30.0, eps)
    halves = {kk: plan_mean(info.counts, 30.0, eps, "capped_weights", k=kk) for kk in range(1, 31)}
    best = min(p.noise_scale * math.log(20) + p.worst_case_bias for p in halves.values())
    got = halves[k].noise_scale * math.log(20) + halves[k].worst_case_bias
    assert got <= best * (1 + 1e-9)
    formula = capped_half_widths(info, 30.0, eps, np.array([k]))[0]
    assert formula == pytest.approx(got, rel=1e-9)


def test_auto_objective_interval_never_wider_than_baseline() -> None:
    rng = np.random.default_rng(9)
    for _ in range(20):
        counts = rng.integers(1, 40, size=int(rng.integers(5, 80)))
        auto = plan_mean(counts, 30.0, 1.0, "auto", objective="interval")
        base = plan_mean(counts, 30.0, 1.0, "baseline")
        assert auto.mechanism == "capped_weights"
        half = auto.noise_scale * math.log(20) + auto.worst_case_bias
        assert half <= base.noise_scale * math.log(20) + base.worst_case_bias + 1e-12
