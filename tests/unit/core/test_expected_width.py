"""``expected_ci95_width`` (the release preview's, public) against the widths published."""

from __future__ import annotations

import numpy as np
import pytest

from app.core import expected_ci95_width, release_mean, release_variance
from research.noise import SeededNoise
from tests.unit.core.helpers import random_grid

U = 30.0


@pytest.mark.parametrize(
    ("statistic", "mechanism", "options"),
    [
        ("mean", "auto", {}),
        ("mean", "auto", {"objective": "interval"}),
        ("mean", "baseline", {}),
        ("variance", "auto", {}),
        ("variance", "auto", {"objective": "interval"}),
    ],
)
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_published_widths_never_exceed_the_expected_one(
    statistic: str, mechanism: str, options: dict[str, str], eps: float
) -> None:
    release = release_mean if statistic == "mean" else release_variance
    for seed in range(4):
        rng = np.random.default_rng(seed)
        grid = random_grid(rng, U, n_users=int(rng.integers(20, 300)), max_count=12)
        want = expected_ci95_width(statistic, grid.counts, U, eps, mechanism, **options)
        noise = SeededNoise(np.random.default_rng(seed))
        widths = []
        for _ in range(30):
            rel = release(grid, U, eps, mechanism, noise=noise, **options)
            if rel.ci95 is not None:
                widths.append(rel.ci95[1] - rel.ci95[0])
        top = U if statistic == "mean" else U * U / 4
        if not widths:  # no honest interval known (centred_clip, centred): the range
            assert want == top
            continue
        assert max(widths) <= want * (1 + 1e-9) and want <= top
