"""``user_window``'s ci95 on adversarial grids: its exact coverage, computed from the exact
law of OpenDP's noisy max (quadrature) and the Laplace CDF, not sampled.

The audit's grid: many users whose records all equal ``U``, where the float mean of a
user's records can round just above ``U``. Unclamped, such a user counts as clipped by
every window, ``b = U`` included, and the interval's clipped-user bound undercounts
(exact coverage 0.01). Each user's mean is clamped to ``[0, U]`` (docs/math.md §11.2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core import GridData, release_mean
from app.core.data.counts import prepare_counts
from app.core.mechanisms.float_sums import exact_sum, float_sum_sensitivity
from app.core.mechanisms.interval import isolated_head_sums
from app.core.mechanisms.mean_window import (
    SPREAD_BETA,
    WINDOW_FRACTIONS,
    clipped_bound,
    split_share,
    window_counts,
    window_penalties,
    window_spread,
    window_weights,
)
from app.core.noise.laplace import calibrate_choice_scale, calibrate_scale
from tests.security.audit_choices import noisy_max_law
from tests.unit.core.helpers import ZeroNoise


def _laplace_cdf(x: float, scale: float) -> float:
    return 0.5 * math.exp(x / scale) if x < 0 else 1.0 - 0.5 * math.exp(-x / scale)


def exact_coverage(grid: GridData, U: float, eps: float, *, clamp: bool = True) -> float:
    """P(μ ∈ ci95) for ``user_window`` at ``eps``: Σ_j P(window j)·P(Laplace keeps μ inside).

    ``clamp=False`` is the broken copy: user means as the float division gives them."""
    info = prepare_counts(grid.counts)
    e_w, e_n = split_share(eps, 0.2)
    m = info.eff[info.active].astype(np.float64)
    v = isolated_head_sums(grid, info.eff)[info.active] / m
    if clamp:
        v = np.clip(v, 0.0, U)
    w = window_weights(info)
    bounds = U * np.asarray(WINDOW_FRACTIONS)
    pen = window_penalties(U, bounds, float(w.max()), int(info.active.size), e_n)
    law = noisy_max_law(
        -window_counts(v, bounds, np.array([0, v.size]))[0] - pen,
        calibrate_choice_scale(1, 2.0 * e_w),
    )
    mu = exact_sum(grid.values) / grid.values.size
    covered = 0.0
    for j, p_j in enumerate(law):
        b = float(bounds[j])
        T = exact_sum(w * np.minimum(v, b))
        spread = window_spread(info, U, b, min(v.size, int(clipped_bound(pen, j, e_w))))
        scale = calibrate_scale(float_sum_sensitivity(b * float(w.max()), b), e_n)
        q = scale * math.log(1.0 / (0.05 - SPREAD_BETA))
        # μ ∈ [T + Z - q - below, T + Z + q + above] (projection keeps μ ∈ [0, U] inside)
        lo, hi = mu - T - q - spread.above, mu - T + q + spread.below
        covered += p_j * (_laplace_cdf(hi, scale) - _laplace_cdf(lo, scale))
    return covered


def _rounding_up(m: int) -> float:
    """A value ``U`` whose ``m`` copies sum (as the grid sums them) to a mean above ``U``."""
    for U in [*np.round(np.arange(20.0, 60.0, 0.1), 1).tolist(), 26.8224]:
        grid = GridData.from_user_values([[U] * m])
        if isolated_head_sums(grid, grid.counts)[0] / m > U:
            return float(U)
    raise AssertionError(f"no U in the search rounds a mean of {m} copies up")


@pytest.mark.parametrize(("m", "n_users", "at_top"), [(3, 200, 100), (3, 120, 80), (11, 150, 100)])
def test_users_all_at_U_keep_the_coverage(m: int, n_users: int, at_top: int) -> None:
    U = _rounding_up(m)
    grid = GridData.from_user_values([[U] * m] * at_top + [[0.0] * m] * (n_users - at_top))
    assert exact_coverage(grid, U, 1.0) >= 0.95
    # the broken copy (no clamp) is caught on the same grid
    assert exact_coverage(grid, U, 1.0, clamp=False) < 0.5


def test_release_clamps_user_means_into_the_range() -> None:
    U = _rounding_up(3)
    grid = GridData.from_user_values([[U] * 3] * 30 + [[0.0] * 3] * 10)
    # no Laplace noise and an all but certain choice: the top window clips nobody, so the
    # noiseless estimate is the exact mean and the interval holds it
    rel = release_mean(grid, U, 1e6, "user_window", noise=ZeroNoise())
    assert 0.0 <= rel.estimate <= U
    assert rel.ci95 is not None and rel.ci95[0] <= float(np.mean(grid.values)) <= rel.ci95[1]


@pytest.mark.parametrize(
    "users",
    [
        [[30.0] * 40] + [[5.0]] * 30,  # one heavy user at U
        [[0.0, 0.0]] * 35 + [[30.0, 30.0]] * 5,  # most users at 0
        [[30.0]] * 35 + [[0.0]] * 5,  # most users at U
        [[12.5] * 3] * 40,  # every record equal
    ],
    ids=["one-heavy", "most-at-0", "most-at-U", "all-equal"],
)
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_adversarial_grids_cover_at_least_95_percent(users: list[list[float]], eps: float) -> None:
    assert exact_coverage(GridData.from_user_values(users), 30.0, eps) >= 0.95
