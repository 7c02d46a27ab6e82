"""``expected_errors`` (many grids in arrays, the release preview's) gives, grid by grid,
the floats of ``expected_error`` on each grid's kept counts alone."""

from __future__ import annotations

import numpy as np
import pytest

from app.core import expected_error, expected_errors

U = 30.0


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("statistic", ["mean", "variance", "user_mean"])
def test_expected_errors_are_the_per_grid_errors(seed: int, statistic: str) -> None:
    rng = np.random.default_rng(seed)
    kept = []
    for users in rng.choice([1, 2, 5, 30, 200, 900], size=80):
        k = rng.choice([1, 1, 2, 4, 5, 9, 40], size=int(users))
        k[rng.random(k.size) < 0.2] = 0  # users left out by the plan
        k[0] = max(k[0], 1)
        kept.append(k.astype(np.int64))
    for eps in (0.05, 0.4, 1.0, 3.0):
        got = expected_errors(statistic, kept, U, eps).tolist()
        want = [expected_error(statistic, k[k > 0], U, eps) for k in kept]
        assert got == want


def test_a_grid_without_kept_users_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        expected_errors("mean", [np.array([1, 2]), np.array([0, 0])], U, 1.0)
