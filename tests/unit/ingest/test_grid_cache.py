"""The process-wide LRU of grid engine inputs is bounded in bytes."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from app.datasets import grid_store
from app.datasets.grid_store import _LRU, GridArrays


def arrays(grid_id: int, n: int) -> GridArrays:
    users = np.arange(n, dtype="<i8").tobytes()
    return GridArrays.from_bytes(grid_id, 1, users, np.ones(n, "<i8").tobytes(), b"\0" * 8 * n)


def test_lru_evicts_least_recently_used_by_bytes() -> None:
    # one record per user: 8 (user id) + 8 (count) + 4 × 8 (the value, its copy in the
    # engine grid and two prefix sums) = 48 bytes per user
    per_grid = 48 * 10
    lru = _LRU(max_bytes=3 * per_grid)  # three grids of 10 users
    for g in range(3):
        lru.put(("p", g, 1), arrays(g, 10))
    assert lru.get(("p", 0, 1)) is not None  # 0 is now the most recent
    lru.put(("p", 3, 1), arrays(3, 10))
    assert lru.get(("p", 1, 1)) is None  # the least recent went
    assert all(lru.get(("p", g, 1)) is not None for g in (0, 2, 3))
    assert lru.bytes == 3 * per_grid
    lru.put(("p", 9, 1), arrays(9, 1000))  # larger than the whole budget: not cached
    assert lru.get(("p", 9, 1)) is None and lru.bytes == 3 * per_grid
    lru.resize(per_grid)
    assert lru.bytes <= per_grid


def test_arrays_are_read_only_and_typed() -> None:
    a = arrays(1, 4)
    assert a.user_ids.dtype == np.int64 and a.values.dtype == np.float64
    assert not (a.user_ids.flags.writeable or a.counts.flags.writeable or a.values.flags.writeable)
    assert a.nbytes == 4 * 48  # ids, counts, and the values four times (see GridArrays.nbytes)


def test_configure_grid_cache() -> None:
    before = grid_store.grid_cache_info()["max_bytes"]
    try:
        grid_store.configure_grid_cache(1234)
        assert grid_store.grid_cache_info()["max_bytes"] == 1234
    finally:
        grid_store.configure_grid_cache(before)


def test_engine_grid_is_built_once_per_cached_version() -> None:
    a = arrays(1, 4)
    assert a.grid is a.grid  # prefix sums and groupings survive between queries
    assert a.grid.counts.tolist() == a.counts.tolist()
    assert a.grid.values.tolist() == a.values.tolist()


def test_get_many_is_get_of_each_key(monkeypatch) -> None:
    """Hits and misses counted as :meth:`get` would, hits made the most recent; keys
    looked up a chunk at a time; nothing looked up while the cache is empty."""
    monkeypatch.setattr(grid_store, "_LOOKUP_CHUNK", 2)
    when = datetime(2024, 3, 5, tzinfo=UTC)
    grids = [grid_store.GridRow(g, "p", "c", when, 1, 1) for g in range(10)]
    asked = grids[:5]
    lru = _LRU(max_bytes=10**6)
    assert lru.get_many(asked, grid_store._key) == [None] * 5
    assert (lru.hits, lru.misses) == (0, 5)
    for g in (1, 3, 9):
        lru.put(grid_store._key(grids[g]), arrays(g, 2))
    got = lru.get_many(asked, grid_store._key)
    assert [a.grid_id if a is not None else None for a in got] == [None, 1, None, 3, None]
    assert (lru.hits, lru.misses) == (2, 8)
    assert [k[1] for k in lru._items] == [9, 1, 3]  # the hits are now the most recent
