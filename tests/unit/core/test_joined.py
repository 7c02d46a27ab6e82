"""Grids joined for the window path (app/core/data/joined.py): the columns of the grids in order,
unreadable caps marked -1, and any subset taken in any order equal to joining it anew."""

from __future__ import annotations

import numpy as np

from app.core import GridData
from app.core.data.joined import JoinedGrids


def _grids(rng: np.random.Generator, n: int) -> tuple[list[GridData], list[np.ndarray]]:
    grids, caps = [], []
    for _ in range(n):
        counts = rng.integers(1, 6, size=int(rng.integers(1, 9)))
        grids.append(GridData.from_counts_and_values(counts, rng.random(int(counts.sum()))))
        caps.append(rng.integers(0, 4, size=counts.size))
    return grids, caps


def _same(a: JoinedGrids, b: JoinedGrids) -> None:
    for name in ("counts", "caps", "values", "pairs", "records"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name


def test_joined_grids_are_their_columns_in_order() -> None:
    grids, caps = _grids(np.random.default_rng(1), 40)
    j = JoinedGrids.of(grids, caps)
    assert j.n_grids == 40
    for i, (g, c) in enumerate(zip(grids, caps, strict=True)):
        assert j.counts[j.pairs[i] : j.pairs[i + 1]].tolist() == g.counts.tolist()
        assert j.caps[j.pairs[i] : j.pairs[i + 1]].tolist() == c.tolist()
        assert j.values[j.records[i] : j.records[i + 1]].tolist() == g.values.tolist()
        assert (j.user_grid()[j.pairs[i] : j.pairs[i + 1]] == i).all()


def test_a_subset_in_any_order_is_that_subset_joined() -> None:
    rng = np.random.default_rng(2)
    grids, caps = _grids(rng, 50)
    j = JoinedGrids.of(grids, caps)
    for idx in ([3, 0, 49, 7], list(range(50))[::-1], [11], []):
        _same(j.take(idx), JoinedGrids.of([grids[i] for i in idx], [caps[i] for i in idx]))


def test_caps_that_are_not_the_users_are_marked() -> None:
    grids, caps = _grids(np.random.default_rng(3), 4)
    caps[1] = caps[1][:-1] if caps[1].size > 1 else np.array([1, 1])  # wrong shape
    caps[2] = caps[2].astype(np.float64)  # not integers
    j = JoinedGrids.of(grids, caps)
    for i in (1, 2):
        assert (j.caps[j.pairs[i] : j.pairs[i + 1]] == -1).all()
    for i in (0, 3):
        assert (j.caps[j.pairs[i] : j.pairs[i + 1]] >= 0).all()
