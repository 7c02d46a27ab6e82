"""``expected_ci95_widths`` (many grids at once) equals ``expected_ci95_width`` grid by
grid, bit for bit: the preview's and the release's useful share rest on it."""

from __future__ import annotations

import numpy as np
import pytest

from app.core import expected_ci95_width, expected_ci95_widths

U = 10.0


def _grids(seed: int, n_grids: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Grids of every size from one user to many (both of auto's paths), caps below the
    counts for some users and zero for others."""
    rng = np.random.default_rng(seed)
    counts, caps = [], []
    for _ in range(n_grids):
        users = int(rng.choice([1, 2, 3, 8, 40, 400]))
        c = rng.integers(1, 14, users)
        k = np.minimum(c, rng.integers(0, 10, users))
        k[0] = max(int(k[0]), 1)  # a released grid keeps a user
        counts.append(c)
        caps.append(k)
    return counts, caps


@pytest.mark.parametrize("statistic", ["mean", "variance", "user_mean"])
@pytest.mark.parametrize(
    ("mechanism", "options"),
    [("auto", {"objective": "accuracy"}), ("auto", {}), ("baseline", {})],
)
@pytest.mark.parametrize("eps", [0.05, 0.7, 4.0, 100.0])
def test_many_grids_equal_each_grid_alone(
    statistic: str, mechanism: str, options: dict[str, str], eps: float
) -> None:
    if mechanism == "baseline" and statistic == "user_mean":
        pytest.skip("user_mean has its own mechanism only")
    counts, caps = _grids(int(eps * 100), 30)
    one = [
        expected_ci95_width(statistic, c, U, eps, mechanism, caps=k, **options)
        for c, k in zip(counts, caps, strict=True)
    ]
    many = expected_ci95_widths(statistic, counts, caps, U, eps, mechanism, options)
    assert many.tolist() == one


def test_both_paths_and_useful_widths_are_exercised() -> None:
    """The grids above reach narrower widths than the range for every statistic (so the
    equality is not of ranges only)."""
    counts, caps = _grids(400, 30)
    for statistic, top in [("mean", U), ("variance", U * U / 4), ("user_mean", U)]:
        many = expected_ci95_widths(statistic, counts, caps, U, 100.0)
        assert np.any(many < top), statistic


def test_no_grid() -> None:
    assert expected_ci95_widths("mean", [], [], U, 1.0).size == 0
