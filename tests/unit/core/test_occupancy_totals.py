"""Per-grid record totals of an occupancy and a span's coverage, against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.occupancy import validate_occupancy
from app.datasets.grid_store import GridArrays
from app.releases.adaptive import coverage


def _random_occupancy(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pairs = {(int(g), int(u)) for g, u in rng.integers(0, [40, 300], size=(2000, 2))}
    g, u = (np.array(x, dtype=np.int64) for x in zip(*sorted(pairs), strict=True))
    big = rng.random(g.size) < 0.01  # a few counts near the 2**31 limit's scale
    c = np.where(big, rng.integers(1, 2**24, g.size), rng.integers(1, 50, g.size))
    return g, u, c


def test_grid_totals_are_the_brute_force_sums() -> None:
    rng = np.random.default_rng(11)
    for _ in range(20):
        g, u, c = _random_occupancy(rng)
        occ = validate_occupancy(g, u, c)
        want: dict[int, int] = {}
        for gi, ci in zip(g.tolist(), c.tolist(), strict=True):
            want[gi] = want.get(gi, 0) + ci
        assert occ.n_per_grid.dtype == np.int64
        assert dict(zip(occ.grid_ids.tolist(), occ.n_per_grid.tolist(), strict=True)) == want


def test_a_grid_total_of_2_to_the_31_is_refused() -> None:
    g, u = np.array([0, 0, 1]), np.array([0, 1, 0])
    ok = validate_occupancy(g, u, np.array([2**30, 2**30 - 1, 5]))
    assert ok.n_per_grid.tolist() == [2**31 - 1, 5]
    with pytest.raises(ValueError, match="below 2\\*\\*31"):
        validate_occupancy(g, u, np.array([2**30, 2**30, 5]))


def _arrays(users: list[int], counts: list[int]) -> GridArrays:
    return GridArrays(
        grid_id=0,
        version=1,
        user_ids=np.array(users, dtype=np.int64),
        counts=np.array(counts, dtype=np.int64),
        values=np.zeros(sum(counts)),
    )


def test_coverage_is_the_brute_force_share() -> None:
    rng = np.random.default_rng(5)
    for _ in range(30):
        arrays = []
        for _ in range(int(rng.integers(0, 12))):
            users = sorted(set(rng.integers(0, 40, int(rng.integers(0, 8))).tolist()))
            arrays.append(_arrays(users, rng.integers(1, 9, len(users)).tolist()))
        covered = rng.random(len(arrays)) < 0.5
        records = sum(int(a.counts.sum()) for a in arrays)
        kept = sum(int(a.counts.sum()) for a, c in zip(arrays, covered, strict=True) if c)
        every = {u for a in arrays for u in a.user_ids.tolist()}
        inside = {u for a, c in zip(arrays, covered, strict=True) if c for u in a.user_ids.tolist()}
        got = coverage(arrays, covered.tolist())
        assert got.records == (kept / records if records else 0.0)
        assert got.users == (len(inside) / len(every) if every else 0.0)
