"""The batched window path of a slot release (docs/math.md §9.4.9) is the grid-by-grid one:
on random grids, with the same seeded private choices and noise, every release is bit for
bit what ``start_releases`` / ``finish_releases`` give grid by grid; the vectorised exact
scale calibration is ``calibrate_scale``; grids off the window path keep the per-grid path."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from app.core import GridData, finish_batch, finish_releases, start_many, start_releases
from app.core.engine.many_grids import GridError
from app.core.mechanisms.float_sums import (
    float_sum_sensitivities,
    float_sum_sensitivity,
    float_variance_sensitivities,
    float_variance_sensitivity,
)
from app.core.noise.laplace import calibrate_scale
from app.core.noise.many import calibrate_scales
from research.noise import SeededNoise
from tests.unit.core.helpers import release_fields

U = 30.0


def _grid(rng: np.random.Generator, users: int) -> tuple[GridData, np.ndarray]:
    counts = rng.choice([1, 1, 1, 2, 3, 5, 8, 20], size=users)
    values = rng.choice([0.0, 0.0, U, U / 3], size=int(counts.sum()))
    values = np.where(rng.random(values.size) < 0.5, rng.random(values.size) * U, values)
    caps = np.where(rng.random(users) < 0.2, rng.integers(0, 3, size=users), counts)
    if not np.any(caps > 0):
        caps[0] = counts[0]
    return GridData.from_counts_and_values(counts, values), caps.astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("statistics", [("mean", "variance"), ("mean",), ("variance",)])
def test_batched_windows_are_the_per_grid_releases_bit_for_bit(
    seed: int, statistics: tuple[str, ...]
) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 3, 5, 8, 9, 17, 40, 130, 300], size=60)
    made = [_grid(rng, int(s)) for s in sizes]
    grids, caps = [g for g, _ in made], [c for _, c in made]
    eps = float(rng.choice([0.05, 0.3, 1.7]))
    src = SeededNoise(np.random.default_rng(seed + 1000))
    one = []
    for g, c in zip(grids, caps, strict=True):
        one += start_releases(
            statistics, g, U, eps, "auto", caps=c, noise=src, objective="accuracy"
        )
    a = finish_releases(one, src)
    src = SeededNoise(np.random.default_rng(seed + 1000))
    many = start_many(statistics, grids, caps, U, eps, "auto", noise=src, objective="accuracy")
    b = finish_batch(many, src).releases()
    assert {r.mechanism for r in a} <= {"user_window", "window"}
    assert [release_fields(r) for r in a] == [release_fields(r) for r in b]


def test_grids_off_the_window_path_run_grid_by_grid() -> None:
    rng = np.random.default_rng(5)
    big = GridData.from_counts_and_values(np.full(3000, 6), rng.random(18000) * U)
    small, caps = _grid(rng, 12)
    src = SeededNoise(np.random.default_rng(1))
    many = start_many(
        ("mean", "variance"), [big, small], [np.full(3000, 6), caps], U, 2.0, noise=src,
        objective="accuracy",
    )  # fmt: skip
    assert many.mechanism == ["centred_clip", "centred", "user_window", "window"]


def test_a_grid_that_cannot_be_released_is_named() -> None:
    rng = np.random.default_rng(6)
    good, caps = _grid(rng, 5)
    bad = GridData.from_counts_and_values([2], [1.0, U + 1.0])
    with pytest.raises(GridError) as err:
        start_many(("mean",), [good, bad], [caps, np.array([2])], U, 1.0, objective="accuracy")
    assert err.value.index == 1


def test_calibrate_scales_is_calibrate_scale() -> None:
    rng = np.random.default_rng(7)
    sens = np.concatenate(
        [
            rng.random(4000) * 10.0 ** rng.integers(-8, 8, size=4000),
            [0.0, 1.0, 3.0, 0.1, 1e-300, 5e-324, 1e300, 30.0, 2.5, 7.0],
            np.arange(1, 1000) * 0.1,
        ]
    )
    for eps in (1.0 / 3.0, 0.7, 0.3, 1e-3, 9.9, 0.1, 0.04, 0.0999999999999, 1e-200):
        fit = sens[sens <= 1e300 * eps]
        got = calibrate_scales(fit, eps)
        want = [calibrate_scale(float(s), eps) for s in fit]
        assert got.tolist() == want
    with pytest.raises(ValueError, match="overflows"):
        calibrate_scales([1.0, 1e300], 1e-10)


def test_float_sensitivities_bound_the_exact_rule() -> None:
    """Each entry, in arrays and on floats, is at least the rule's exact bound (docs/math.md
    §9.5) worked out in rationals, and no looser than a few roundings above it."""
    rng = np.random.default_rng(8)
    sens = np.concatenate(
        [rng.random(3000) * 10.0 ** rng.integers(-12, 6, size=3000), [0.0, 1.0, 5e-324, 1e300]]
    )
    bounds = np.concatenate([rng.random(3000) * 10.0 ** rng.integers(-3, 4, 3000), [0, 30, 1, 0]])
    per_user = rng.integers(0, 500, size=sens.size)
    u = Fraction(2) ** -53
    tiny = Fraction(2) ** -1070
    for r in (0, 2, 7):
        got = float_sum_sensitivities(sens, bounds, r)
        for g, s, b in zip(got.tolist(), sens.tolist(), bounds.tolist(), strict=True):
            ulp = 2 * Fraction(math.ulp(2.0 * max(b, s)))
            exact = Fraction(s) * (1 + u) ** (r + 2) + ulp
            loose = (Fraction(s) * (1 + 2 * (r + 2) * u) + ulp) * (1 + 16 * u) + tiny
            assert exact <= Fraction(g) <= loose
            assert float_sum_sensitivity(s, b, r) == g  # the same rule on floats
    got = float_variance_sensitivities(sens, bounds, per_user)
    for g, s, b, k in zip(got.tolist(), sens.tolist(), bounds.tolist(), per_user, strict=True):
        exact = Fraction(s) * (1 + 4 * u) + (2 * int(k) + 32) * u * Fraction(b) ** 2
        assert exact <= Fraction(g) <= exact * (1 + 16 * u) + tiny
        assert float_variance_sensitivity(s, b, int(k)) == g
    for bad in (np.array([-1.0]), np.array([np.nan]), np.array([np.inf])):
        with pytest.raises(ValueError, match="invalid"):
            float_sum_sensitivities(bad, np.array([1.0]))
        with pytest.raises(ValueError, match="invalid"):
            float_variance_sensitivities(bad, np.array([1.0]), np.array([1]))
        with pytest.raises(ValueError, match="invalid"):
            float_sum_sensitivity(float(bad[0]), 1.0)


def test_interleave_is_concat_in_grid_order() -> None:
    from app.core.engine.batch import PendingBatch

    def part(stat: str, n: int) -> PendingBatch:
        return PendingBatch(
            statistic=[stat] * n, mechanism=["m"] * n, epsilon=[0.1] * n,
            value=[float(i) for i in range(n)], sensitivity=[1.0] * n,
            scale=[float(i + 1) for i in range(n)], bias=[None] * n,
            spread=[(0.0, float(i), 0.01) for i in range(n)],
            kept=[np.array([i]) for i in range(n)], details=[{"i": i} for i in range(n)], U=3.0,
        )  # fmt: skip

    parts = [part("mean", 5), part("variance", 5)]
    got = PendingBatch.interleave(parts)
    want = PendingBatch.concat(parts, [s * 5 + g for g in range(5) for s in range(2)])
    assert got.statistic == want.statistic and got.value == want.value
    assert got.spread == want.spread and got.details == want.details and got.U == want.U
    assert [k.tolist() for k in got.kept] == [k.tolist() for k in want.kept]
    with pytest.raises(ValueError, match="one length"):
        PendingBatch.interleave([part("mean", 2), part("variance", 3)])
