"""The engine's interface: joint releases, quotes, refusals and option checks, prefix
sums, the d-dimensional mechanism and the registry (the estimates: test_engine.py)."""

from __future__ import annotations

import numpy as np
import pytest

from app.core import (
    MEAN_MECHANISMS,
    GridData,
    plan_joint,
    plan_mean,
    plan_variance,
    quote_epsilon,
    release_joint,
    release_mean,
    validate_options,
    worst_case_optimal_d,
)
from app.core.mechanisms.bounds import joint_clip_error
from app.core.mechanisms.variance import head_moments
from tests.unit.core.helpers import BOUNDED, U, ZeroNoise, random_grid


@pytest.mark.parametrize("split", ["half", "optimal"])
def test_joint_release(split: str) -> None:
    grid = random_grid(np.random.default_rng(6), U, n_users=12, max_count=40)
    counts = grid.counts
    n = int(counts.sum())
    mean, var = release_joint(grid, U, 1.0, "clip", split=split, noise=ZeroNoise())
    m = mean.details["m"]
    kept = np.minimum(counts, m)
    assert np.array_equal(mean.kept, kept) and np.array_equal(var.kept, kept)
    errors = {
        k: joint_clip_error(
            U, 1.0, min(k, int(counts.max())), int(np.minimum(counts, k).sum()), n, split=split
        )
        for k in range(int(counts.min()), int(counts.max()) + 1)
    }
    assert errors[m] == pytest.approx(min(errors.values()))
    assert mean.details["joint_error"] == pytest.approx(errors[m], rel=1e-9)
    assert mean.details["joint_error"] == pytest.approx(
        mean.worst_case_error + var.worst_case_error
    )
    vals = grid.values[grid.record_rank < kept[grid.record_user]]
    assert mean.estimate == pytest.approx(vals.mean())
    assert var.estimate == pytest.approx(vals.var())
    base_mean, _ = plan_joint(counts, U, 1.0, "baseline", split=split)
    assert np.array_equal(base_mean.kept, counts) and base_mean.worst_case_bias == 0


def test_joint_with_a_single_record_and_optimal_split() -> None:
    mean, var = plan_joint([1], U, 1.0, "clip", split="optimal")
    assert var.sensitivity == 0 and var.noise_scale == 0 and var.epsilon == 0
    assert mean.epsilon == pytest.approx(1.0)
    assert joint_clip_error(U, 1.0, 1, 1, 1, split="optimal") == pytest.approx(U)


# ----------------------------------------------------------------- quotes
def test_quote_epsilon() -> None:
    counts = np.array([417, 200, 46, 46, 30, 5, 1, 1, 1, 80, 12, 13, 14])
    for target in (2.0, 10.0, 30.0):
        eps, name = quote_epsilon(counts, U, target, max_epsilon=50.0)
        assert plan_mean(counts, U, eps, name).worst_case_error <= target
        assert plan_mean(counts, U, eps * (1 - 1e-6), name).worst_case_error > target
        best_elsewhere = min(
            plan_mean(counts, U, eps * (1 - 1e-6), m).worst_case_error for m in BOUNDED
        )
        assert best_elsewhere > target
    assert quote_epsilon(counts, U, 1e-6, max_epsilon=1.0) is None
    eps, name = quote_epsilon(counts, U, 500.0, "variance", max_epsilon=10.0)
    assert plan_variance(counts, U, eps, name).worst_case_error <= 500.0


# ------------------------------------------------------------- validation
@pytest.mark.parametrize("eps", [0, -1, float("inf"), float("nan")])
def test_bad_epsilon(eps: float) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        plan_mean([1, 2], U, eps)
    with pytest.raises(ValueError, match="epsilon"):
        release_mean(GridData.from_user_values([[1.0]]), U, eps)


def test_bad_inputs() -> None:
    grid = GridData.from_user_values([[1.0, 2.0], [70.0]])
    with pytest.raises(ValueError, match=r"\[0, U\]"):
        release_mean(grid, U, 1.0)
    with pytest.raises(ValueError, match="U"):
        release_mean(grid, 0.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        release_mean(GridData.from_user_values([[1.0, float("nan")]]), U, 1.0)
    with pytest.raises(ValueError, match="no record"):
        release_mean(GridData.from_user_values([[], []]), U, 1.0)
    with pytest.raises(ValueError, match="unknown mean mechanism"):
        plan_mean([1, 2], U, 1.0, "nope")
    with pytest.raises(ValueError, match="unknown option"):
        plan_mean([1, 2], U, 1.0, "clip", m_ub=2)
    with pytest.raises(ValueError, match="m_ub must lie"):
        plan_mean([1, 5], U, 1.0, "array_avg_bestfit", m_ub=7)
    with pytest.raises(ValueError, match="caps"):
        plan_mean([1, 2], U, 1.0, caps=[1])
    with pytest.raises(ValueError, match="counts"):
        plan_mean([1, -2], U, 1.0)
    with pytest.raises(ValueError, match="offsets"):
        GridData(values=np.array([1.0, 2.0]), offsets=np.array([0, 3]))


def test_validate_options_coerces() -> None:
    assert validate_options("mean", "levy", {"gamma": "0.1", "user_mean_fill": "false"}) == {
        "gamma": 0.1,
        "m_ub": None,
        "user_mean_fill": False,
    }
    assert validate_options("mean", "clip", {"m": "4"}) == {"m": 4}
    assert validate_options("joint", "clip", {"split": "OPTIMAL"})["split"] == "optimal"
    for bad in ({"gamma": "1"}, {"gamma": "x"}, {"m_ub": "2.5"}, {"user_mean_fill": "maybe"}):
        with pytest.raises(ValueError, match="option"):
            validate_options("mean", "levy", bad)
    with pytest.raises(ValueError, match="must lie"):
        validate_options("mean", "clip", {"m": 0})
    for spec in MEAN_MECHANISMS.values():
        for opt in spec.options.values():
            assert opt.description and opt.type in ("int", "float", "bool", "choice")


# --------------------------------------------------------------- grid data
def test_grid_prefix_sums() -> None:
    rng = np.random.default_rng(9)
    users = [rng.uniform(0, U, size=int(k)) for k in rng.integers(0, 20, size=30)]
    grid = GridData.from_user_values(users)
    assert grid.n_users == 30 and grid.n_records == sum(u.size for u in users)
    kept = np.array([rng.integers(0, u.size + 1) for u in users])
    sums = grid.head_sums(kept)
    assert sums == pytest.approx([u[:k].sum() for u, k in zip(users, kept, strict=True)])
    heads = np.concatenate([u[:k] for u, k in zip(users, kept, strict=True)])
    mean, var = head_moments(grid, kept, U)
    assert mean == pytest.approx(heads.mean())
    assert var == pytest.approx(heads.var(), rel=1e-9)
    assert not grid.values.flags.writeable


# ------------------------------------------------------------- d dimensions
def test_d_dimensional_reduces_to_the_1d_mechanism() -> None:
    rng = np.random.default_rng(10)
    grid = random_grid(rng, U, n_users=9, max_count=10)
    for fill in (True, False):
        one = worst_case_optimal_d(
            grid.values[:, None], grid.offsets, U, 1.0, user_mean_fill=fill, noise=ZeroNoise()
        )
        ref = release_mean(
            grid, U, 1.0, "worst_case_optimal", user_mean_fill=fill, noise=ZeroNoise()
        )
        assert one.estimate[0] == pytest.approx(ref.estimate)
        assert one.sensitivity == pytest.approx(ref.sensitivity)
        assert one.worst_case_error == pytest.approx(ref.worst_case_error)


def test_d_dimensional_sensitivity_covers_the_worst_neighbour() -> None:
    """d = 2: one user moving every record from b·e1 to b·e2 moves the sum by 2 m b."""
    counts = np.array([3, 1, 1])
    offsets = np.concatenate(([0], np.cumsum(counts)))
    eps = 4.0  # ceil(4/4) = 1: T = U·3 = largest; user 0 then has [0, U]
    x = np.zeros((5, 2))
    x[:3] = [U, 0.0]
    y = x.copy()
    y[:3] = [0.0, U]
    a = worst_case_optimal_d(x, offsets, U, eps, user_mean_fill=False, noise=ZeroNoise())
    b = worst_case_optimal_d(y, offsets, U, eps, user_mean_fill=False, noise=ZeroNoise())
    moved = np.abs(a.estimate - b.estimate).sum()
    assert moved == pytest.approx(2 * 3 * U / 5)
    assert a.sensitivity >= moved - 1e-12
    assert a.details["T"] == pytest.approx(3 * U)
    assert moved > a.details["T"] / 5  # 003 Lemma III.3's T/n would be too small
    with pytest.raises(ValueError, match="l1 norm"):
        worst_case_optimal_d(np.full((5, 2), U), offsets, U, eps)


def test_quote_respects_min_epsilon() -> None:
    """A target of U/2 is met by worst_case_optimal with T = 0 (no noise) at any tiny
    eps; the quote must still not go below the service's smallest epsilon."""
    from app.core import plan_mean, quote_epsilon

    counts = [1, 2, 5]
    free = quote_epsilon(counts, 10.0, 5.0, max_epsilon=10.0)
    assert free is not None and free[0] < 1e-6
    eps, name = quote_epsilon(counts, 10.0, 5.0, max_epsilon=10.0, min_epsilon=1e-6)
    assert eps >= 1e-6
    assert plan_mean(counts, 10.0, eps, name).worst_case_error <= 5.0


def test_the_registry_declares_each_mechanism_once_with_its_constructor() -> None:
    """Every named mean and variance mechanism carries its constructor; ``quote``'s
    candidates are exactly the bounded ones; ``auto`` and the joint ones have none."""
    from app.core.mechanisms.registry import (
        BOUNDED_CANDIDATES,
        JOINT_MECHANISMS,
        VARIANCE_MECHANISMS,
        mechanisms,
    )

    for statistic, table in (("mean", MEAN_MECHANISMS), ("variance", VARIANCE_MECHANISMS)):
        assert mechanisms(statistic) is table
        for name, spec in table.items():
            assert spec.name == name and (spec.build is None) == (name == "auto")
        bounded = [n for n, s in table.items() if s.bounded and n != "auto"]
        assert list(BOUNDED_CANDIDATES[statistic]) == bounded
    assert all(spec.build is None for spec in JOINT_MECHANISMS.values())
    with pytest.raises(ValueError, match="unknown statistic"):
        mechanisms("median")
