"""The pseudo-user step (004 eq. 15) does not depend on how its candidates are chunked:
a grid whose range ``[Γ_*, Γ*]`` spans several segments gets the same ``m_g`` and error."""

from __future__ import annotations

import numpy as np
import pytest

import app.core.planning.pseudo_user as pu


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_small_chunks_give_the_same_choice(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(chunk)
    for _ in range(20):
        n_grids = int(rng.integers(1, 30))
        kg = np.sort(np.r_[np.arange(n_grids), rng.integers(0, n_grids, 300)])
        kc = rng.geometric(0.15, size=kg.size)  # ranges of up to ~40 counts
        n = np.bincount(kg, weights=kc).astype(np.int64) + rng.integers(0, 50, n_grids)
        want = pu.pseudo_user_step(30.0, 0.5, kg, kc, n, split="half")
        with monkeypatch.context() as m:
            m.setattr(pu, "_CHUNK", chunk)
            got = pu.pseudo_user_step(30.0, 0.5, kg, kc, n, split="half")
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("split", ["half", "optimal"])
def test_the_count_table_gives_the_sorted_sums(split: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ΣΓ(m)`` from the (grid, count) table and from the sorted pairs: the same choice."""
    rng = np.random.default_rng(7)
    for top in (3, 12, 400):
        n_grids = int(rng.integers(1, 40))
        kg = rng.permutation(np.r_[np.arange(n_grids), rng.integers(0, n_grids, 500)])
        kc = rng.integers(1, top, size=kg.size)
        n = np.bincount(kg, weights=kc).astype(np.int64) + rng.integers(0, 50, n_grids)
        table = pu.pseudo_user_step(30.0, 0.5, kg, kc, n, split=split)
        with monkeypatch.context() as m:
            m.setattr(pu, "_by_table", lambda g, c, k, w: pu._by_sort(g, c, k, np.int64(w)))
            sort = pu.pseudo_user_step(30.0, 0.5, kg, kc, n, split=split)
        assert np.array_equal(table[0], sort[0]) and np.array_equal(table[1], sort[1])
