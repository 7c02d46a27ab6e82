"""Count collections and value laws of 003 §IV-A (docs/math.md §7.3)."""

from __future__ import annotations

import numpy as np
import pytest

from research.workloads import (
    extreme_collection,
    geometric_collection,
    truncated_normal_values,
    uniform_values,
)


def test_geometric_collection():
    c = geometric_collection(6)
    assert c.size == 127 and int(c.sum()) == 7 * 64
    for i in range(7):
        assert np.count_nonzero(c == 2 ** (6 - i)) == 2**i
    assert np.all(np.diff(c) <= 0)
    with pytest.raises(ValueError, match="M"):
        geometric_collection(-1)


def test_extreme_collection():
    c = extreme_collection()
    assert c.size == 101 and c[0] == 10 and np.all(c[1:] == 1) and c.sum() == 110
    with pytest.raises(ValueError, match="m_star"):
        extreme_collection(5, 1)


def test_value_laws():
    rng = np.random.default_rng(0)
    u = uniform_values(rng, (400, 500))
    assert u.shape == (400, 500) and u.min() > 0.0 and u.max() <= 65.0
    assert abs(u.mean() - 32.5) < 0.2
    g = truncated_normal_values(rng, 100_000)
    assert g.min() > 0.0 and g.max() <= 65.0
    # N(U/2, U/4): variance U/4 = 16.25 (003 writes N(mean, variance)).
    assert g.mean() == pytest.approx(32.5, abs=0.05)
    assert g.var() == pytest.approx(16.25, rel=0.03)
    # Rejection actually happens when the law has mass outside (0, U].
    h = truncated_normal_values(rng, 50_000, 65.0, mean=0.0, variance=400.0)
    assert h.min() > 0.0 and h.max() <= 65.0
