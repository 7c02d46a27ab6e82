"""Heavy-hitter occupancies of 004 §VI-A2 (docs/math.md §7.2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import app.synth
import research.workloads
from research.workloads import heavy_hitter_occupancy


def test_structure_G12():
    g, u, c = heavy_hitter_occupancy(3, np.random.default_rng(0))
    # Σ_j 2^j (12 - j) for j = 0..11 = 2^13 - 12 - 2 = 8178 pairs.
    assert g.size == u.size == c.size == 8178
    assert g.dtype == u.dtype == c.dtype == np.int64
    assert set(np.unique(u).tolist()) == set(range(1, 4096))
    assert g.min() >= 0 and g.max() <= 11
    assert c.min() >= 1
    per_user = np.bincount(u)
    for user in range(1, 4096):
        j = user.bit_length() - 1  # user in [2^j, 2^{j+1})
        assert per_user[user] == 12 - j
    # Distinct grids per user; user 1 is in all 12 (G1 = G).
    assert np.unique(u * 12 + g).size == g.size
    assert sorted(g[u == 1].tolist()) == list(range(12))


def test_reproducible_and_seed_dependent():
    a = heavy_hitter_occupancy(6, np.random.default_rng(42))
    b = heavy_hitter_occupancy(6, np.random.default_rng(42))
    c = heavy_hitter_occupancy(6, np.random.default_rng(43))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[2], c[2])


def test_top_contributor_scaled_by_one_plus_gamma():
    # Same seed with γ = 0 gives the unscaled draw; only each grid's top row differs.
    g0, u0, c0 = heavy_hitter_occupancy(0, np.random.default_rng(5), G=8)
    g, u, c = heavy_hitter_occupancy(9, np.random.default_rng(5), G=8)
    assert np.array_equal(g, g0) and np.array_equal(u, u0)
    changed = np.flatnonzero(c != c0)
    assert sorted(g[changed].tolist()) == list(range(8))  # one row per grid
    for grid in range(8):
        rows = np.flatnonzero(g0 == grid)
        top = rows[c0[rows] == c0[rows].max()]
        top = top[np.argmin(u0[top])]  # ties: smallest user id
        assert c[top] == 10 * c0[top]
        others = rows[rows != top]
        assert np.array_equal(c[others], c0[others])
        assert c[top] > c[others].max(initial=0)


def test_geometric_counts_and_uniform_grids():
    g, u, c = heavy_hitter_occupancy(0, np.random.default_rng(11), q=0.01)
    # Geo(0.01) on {1, 2, ...}: mean 1/q = 100, sd sqrt(1-q)/q ≈ 99.5; 8178 draws
    # give a standard error ≈ 1.1.
    assert abs(c.mean() - 100.0) < 5.0
    assert abs(np.mean(c == 1) - 0.01) < 0.005
    # Users 2048..4095 occupy one grid each, uniform over the 12 grids.
    single = g[u >= 2048]
    counts = np.bincount(single, minlength=12)
    assert stats.chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"gamma": -1.0}, "gamma"),
        ({"gamma": float("nan")}, "gamma"),
        ({"gamma": 3, "q": 0.0}, "q"),
        ({"gamma": 3, "q": 1.5}, "q"),
        ({"gamma": 3, "G": 0}, "G"),
        ({"gamma": 3, "G": 2.5}, "G"),
    ],
)
def test_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        heavy_hitter_occupancy(rng=np.random.default_rng(0), **kw)


def test_no_global_randomness_in_the_generators():
    # every draw comes from the Generator handed in: none from numpy's global state
    paths = [*Path(app.synth.__file__).parent.glob("*.py"), Path(research.workloads.__file__)]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert "np.random." not in text and "numpy.random" not in text, path
