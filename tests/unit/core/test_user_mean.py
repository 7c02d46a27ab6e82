"""``user_mean`` (docs/math.md §13) against brute force on tiny grids: the float estimate
moves by at most the declared sensitivity between neighbours (and by that much, less
the float allowance, at worst), it misses the per-unit mean by at most the declared bias
(and by that much on some data), its interval covers at the rate it claims on small and
adversarial grids (seeded), and a slot release's arrays give what a single query gives."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from app.core import (
    GridData,
    expected_ci95_width,
    expected_user_mean_widths,
    plan,
    quote_epsilon,
    start_many,
    start_releases,
)
from app.core.data.counts import prepare_counts
from app.core.data.results import LN20, finished_value
from app.core.mechanisms import registry
from app.core.mechanisms.draft import Draft
from app.core.mechanisms.user_mean import rounding_allowance
from research.noise import SeededNoise
from tests.unit.core.helpers import ZeroNoise

U = 30.0
EPS = 0.7
# (counts, caps): whole grids, units left out whole (cap 0) and in part
OCCUPANCIES = [
    ((1,), None),
    ((1, 2), None),
    ((2, 1, 3), None),
    ((3, 3), (3, 1)),
    ((1, 1, 4), (0, 1, 4)),
    ((2, 3, 1), (1, 0, 1)),
]
LEVELS = (0.0, U / 3.0, 0.7 * U, U)  # a record's values in the brute force


def _draft(counts, caps) -> Draft:
    return registry.draft("user_mean", prepare_counts(counts, caps), U, EPS, "auto", {})


def _value(draft: Draft, users: list[list[float]]) -> float:
    return draft.estimator(GridData.from_user_values(users), ZeroNoise()).value


def _exact_per_unit_mean(users: list[list[float]]) -> Fraction:
    return sum((sum(map(Fraction, u)) / len(u) for u in users), Fraction(0)) / len(users)


@pytest.mark.parametrize(("counts", "caps"), OCCUPANCIES)
def test_neighbours_move_the_float_estimate_by_at_most_its_sensitivity(counts, caps) -> None:
    """Every unit's records over every combination of LEVELS, the others at two fixed
    backgrounds: the spread of the float estimate is at most the declared sensitivity,
    and the largest spread reaches the real ``(U/L) max e/m`` (it is not loose)."""
    draft = _draft(counts, caps)
    eff = np.asarray(draft.kept)
    L = len(counts)
    real = U / L * max(e / m for e, m in zip(eff.tolist(), counts, strict=True))
    widest = 0.0
    for background in (0.1 * U, 0.9 * U):
        for unit, m in enumerate(counts):
            outs = []
            for combo in itertools.product(LEVELS, repeat=m):
                users = [[background] * c for c in counts]
                users[unit] = list(combo)
                outs.append(_value(draft, users))
            spread = max(outs) - min(outs)
            assert spread <= draft.sensitivity, (unit, spread, draft.sensitivity)
            widest = max(widest, spread)
    assert draft.sensitivity >= real and draft.sensitivity == pytest.approx(real, rel=1e-12)
    assert widest == pytest.approx(real, rel=1e-12)


@pytest.mark.parametrize(("counts", "caps"), OCCUPANCIES)
def test_bias_bound_is_the_largest_miss_over_every_corner(counts, caps) -> None:
    """Estimate and truth are linear in the values, so the largest miss is at a corner of
    ``[0, U]^n``: every corner is tried; the miss never exceeds the declared bias, and the
    worst corner reaches it up to the rounding allowance."""
    draft = _draft(counts, caps)
    assert draft.bias is not None
    n = sum(counts)
    worst = 0.0
    for corner in itertools.product((0.0, U), repeat=n):
        it = iter(corner)
        users = [[next(it) for _ in range(c)] for c in counts]
        miss = abs(float(_exact_per_unit_mean(users)) - _value(draft, users))
        assert miss <= draft.bias, (users, miss, draft.bias)
        worst = max(worst, miss)
    allowance = float(rounding_allowance(U, np.array([max(draft.kept)]))[0])
    left = sum((m - e) / m for m, e in zip(counts, draft.kept.tolist(), strict=True))
    assert draft.bias == pytest.approx(U / 2 * left / len(counts) + allowance, abs=1e-12)
    assert worst >= draft.bias - 2 * allowance - 1e-12


def test_float_estimate_stays_within_its_rounding_allowance_and_sensitivity() -> None:
    """300 units of awkward floats, one heavy unit of 40 records moved from 0 to U: the
    floats' difference is within the float sensitivity, and each float is within the
    rounding allowance of the exact (rational) estimate."""
    rng = np.random.default_rng(7)
    counts = np.concatenate([[40], rng.integers(1, 30, size=299)])
    others = [list(rng.uniform(0.9, 1.0, size=c) * U) for c in counts[1:]]
    draft = _draft(counts, None)
    out = []
    for heavy in (0.0, U):
        users = [[heavy] * 40, *others]
        value = _value(draft, users)
        exact = _exact_per_unit_mean(users)
        allowance = float(rounding_allowance(U, np.array([40]))[0])
        assert abs(Fraction(value) - exact) <= Fraction(allowance)
        out.append(value)
    assert abs(out[1] - out[0]) <= draft.sensitivity


def test_interval_covers_on_small_and_adversarial_grids() -> None:
    """Seeded Laplace draws through the one interval rule (``finished_value``): coverage of
    the true per-unit mean at least 0.95 - 3 standard errors (n = 4000 a grid; a fixed
    seed, so the test is deterministic), on grids whose left-out units sit at U while the
    read ones sit at 0 (the bias at its bound), at the range's edges, and random ones."""
    rng = np.random.default_rng(2024)
    grids: list[tuple[list[list[float]], list[int] | None]] = [
        ([[0.0], [0.0, 0.0], [U] * 3, [U]], [1, 2, 0, 0]),  # worst-case bias
        ([[0.0]] * 2, None),
        ([[U] * 3] * 5, None),
        ([[0.0] * 2] * 20, [0] * 3 + [2] * 17),
        ([list(rng.uniform(0, U, size=k)) for k in rng.integers(1, 9, size=40)], None),
        ([[U / 2 + 1.0]] * 3, None),
    ]
    n = 4000
    floor = 0.95 - 3 * math.sqrt(0.95 * 0.05 / n)
    for users, caps in grids:
        counts = [len(u) for u in users]
        draft = _draft(counts, caps)
        value = _value(draft, users)
        truth = float(_exact_per_unit_mean(users))
        scale = plan("user_mean", counts, U, EPS, caps=caps).noise_scale
        assert scale is not None
        hits = 0
        for z in rng.laplace(0.0, scale, size=n).tolist():
            estimate, ci, _ = finished_value(
                "user_mean", "baseline", value + z, scale, draft.bias, None, U
            )
            assert ci is not None and ci[0] <= estimate <= ci[1]
            hits += ci[0] <= truth <= ci[1]
        assert hits / n >= floor, (counts, caps, hits / n)


def _grid(rng: np.random.Generator, users: int) -> tuple[GridData, np.ndarray]:
    counts = rng.choice([1, 1, 2, 3, 5, 8, 20], size=users)
    values = rng.uniform(0.0, U, size=int(counts.sum()))
    caps = np.where(rng.random(users) < 0.2, rng.integers(0, 3, size=users), counts)
    caps[0] = counts[0]
    return GridData.from_counts_and_values(counts, values), caps.astype(np.int64)


@pytest.mark.parametrize("seed", range(3))
def test_slot_arrays_are_the_single_query_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    made = [_grid(rng, int(s)) for s in rng.choice([1, 2, 5, 17, 60], size=25)]
    grids, caps = [g for g, _ in made], [c for _, c in made]
    both = start_many(
        ("mean", "user_mean"), grids, caps, U, EPS, noise=SeededNoise(np.random.default_rng(1))
    )
    means = start_many(("mean",), grids, caps, U, EPS, noise=SeededNoise(np.random.default_rng(1)))
    assert both.statistic == ["mean", "user_mean"] * len(grids)
    assert both.value[::2] == means.value and both.scale[::2] == means.scale
    for i, (g, c) in enumerate(zip(grids, caps, strict=True)):
        (one,) = start_releases(("user_mean",), g, U, EPS, caps=c, noise=ZeroNoise())
        row = 2 * i + 1
        assert both.value[row] == one.estimate.value
        assert both.sensitivity[row] == one.estimate.sensitivity
        assert both.scale[row] == one.scale and both.bias[row] == one.draft.bias
        assert both.details[row] == dict(one.draft.details)
        assert both.kept[row].tolist() == one.draft.kept.tolist()
    widths = expected_user_mean_widths([g.counts for g in grids], caps, U, EPS)
    for w, g, c in zip(widths.tolist(), grids, caps, strict=True):
        assert w == expected_ci95_width("user_mean", g.counts, U, EPS, caps=c)
        found = plan("user_mean", g.counts, U, EPS, caps=c)
        assert found.noise_scale is not None and found.worst_case_bias is not None
        assert w == min(U, 2 * (found.noise_scale * LN20 + found.worst_case_bias))


def test_user_mean_options_errors_and_quote() -> None:
    assert list(registry.mechanisms("user_mean")) == ["baseline", "auto"]
    assert registry.validate_options("user_mean", "auto", {}) == {"objective": "accuracy"}
    with pytest.raises(ValueError, match="objective"):
        registry.validate_options("user_mean", "baseline", {"objective": "interval"})
    with pytest.raises(ValueError, match="no record remains"):
        plan("user_mean", [2, 3], U, EPS, caps=[0, 0])
    with pytest.raises(ValueError, match="unknown user_mean mechanism"):
        plan("user_mean", [2, 3], U, EPS, "clip")
    # public counts only: the smallest eps with U/(L eps) (+ its tiny allowance) <= target
    found = quote_epsilon([1, 4, 2, 2], U, 1.5, "user_mean", max_epsilon=10.0)
    assert found is not None and found[1] == "baseline"
    assert found[0] == pytest.approx(U / (4 * 1.5), rel=1e-6)
