"""Per-grid record totals of an occupancy and a span's coverage, against brute force."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np
import pytest

from app.core.data.occupancy import distinct, stable_order, unique_inverse, validate_occupancy
from app.datasets.grid_batch import GridColumns
from app.datasets.grid_store import GridArrays
from app.ledger.accounts import USER_BITS
from app.releases import charges
from app.releases.adaptive import coverage

DAY0 = datetime(2024, 3, 4, 15, tzinfo=UTC)
DAILY = SimpleNamespace(budget_window="day", timezone="UTC")


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


@pytest.mark.parametrize("spread", [1, 10**9])  # dense ids (a table), sparse (sorted)
@pytest.mark.parametrize("share", [0.5, 1.0])  # some grids covered, or all of them
def test_coverage_is_the_brute_force_share(spread: int, share: float) -> None:
    rng = np.random.default_rng(5)
    for _ in range(30):
        arrays = []
        for _ in range(int(rng.integers(0, 12))):
            users = sorted(set(rng.integers(0, 40, int(rng.integers(0, 8))).tolist()))
            users = [7 + u * spread for u in users]
            arrays.append(_arrays(users, rng.integers(1, 9, len(users)).tolist()))
        covered = rng.random(len(arrays)) < share
        records = sum(int(a.counts.sum()) for a in arrays)
        kept = sum(int(a.counts.sum()) for a, c in zip(arrays, covered, strict=True) if c)
        every = {u for a in arrays for u in a.user_ids.tolist()}
        inside = {u for a, c in zip(arrays, covered, strict=True) if c for u in a.user_ids.tolist()}
        got = coverage(GridColumns.of(arrays), covered.tolist())
        assert got.records == (kept / records if records else 0.0)
        assert got.users == (len(inside) / len(every) if every else 0.0)


def _reference(g: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, ...]:
    """The sorts the fast paths replace."""
    grid_ids, ginv = np.unique(g, return_inverse=True)
    user_ids, uinv = np.unique(u, return_inverse=True)
    order = np.argsort(uinv * grid_ids.size + ginv, kind="stable")
    return grid_ids, ginv, user_ids, uinv, order


@pytest.mark.parametrize(
    ("n_grids", "n_users", "user_spread", "grid_sorted"),
    [
        (50, 300, 1, True),  # dense ids, rows by grid: every fast path
        (50, 300, 10**9, True),  # sparse user ids: np.unique
        (50, 300, 1, False),  # rows in any order: the general sort
        (3, 70_000, 1, True),  # more than 2^16 users: two radix passes
    ],
)
def test_indexing_equals_numpy_unique_and_argsort(
    n_grids: int, n_users: int, user_spread: int, grid_sorted: bool
) -> None:
    rng = np.random.default_rng(n_users + n_grids)
    pairs = {(int(g), int(u)) for g, u in rng.integers(0, [n_grids, n_users], size=(9000, 2))}
    rows = sorted(pairs) if grid_sorted else list(pairs)
    if not grid_sorted:
        rng.shuffle(rows)
    g = np.array([r[0] for r in rows], dtype=np.int64)
    u = np.array([r[1] for r in rows], dtype=np.int64) * user_spread
    occ = validate_occupancy(g, u, np.ones(g.size, dtype=np.int64))
    grid_ids, ginv, user_ids, uinv, order = _reference(g, u)
    for got, want in (
        (occ.grid_ids, grid_ids),
        (occ.ginv, ginv),
        (occ.user_ids, user_ids),
        (occ.uinv, uinv),
        (occ.order_u, order),
    ):
        assert got.dtype == np.int64 and np.array_equal(got, want)
    twice = np.r_[0, np.arange(g.size)]  # row 0 twice: adjacent, and kept in grid order
    with pytest.raises(ValueError, match="duplicate"):
        validate_occupancy(g[twice], u[twice], np.ones(twice.size, dtype=np.int64))


@pytest.mark.parametrize("n_keys", [1, 7, 70_000])
def test_stable_order_is_a_stable_argsort(n_keys: int) -> None:
    keys = np.random.default_rng(n_keys).integers(0, n_keys, 20_000)
    assert np.array_equal(stable_order(keys, n_keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize(("n_grids", "top"), [(300, 7), (80_000, 7), (300, 2**31 - 1)])
def test_clip_user_distinct_counts_equal_numpy_unique(n_grids: int, top: int) -> None:
    """Clip-User's (grid, count descending) keys, dense (a presence table) or not."""
    rng = np.random.default_rng(top + n_grids)
    ginv = rng.integers(0, n_grids, 20_000)
    c = rng.integers(1, top + 1, 20_000)
    cmax = int(c.max())
    key = ginv * (cmax + 1) + (cmax - c)
    ids, inv = unique_inverse(key)
    want_ids, want_inv = np.unique(key, return_inverse=True)
    assert np.array_equal(ids, want_ids) and np.array_equal(inv, want_inv)


@pytest.mark.parametrize(("size", "top"), [(0, 1), (1, 0), (20_000, 500), (20_000, 2**40)])
def test_distinct_equals_numpy_unique(size: int, top: int) -> None:
    """Dense values (a presence table), sparse ones (a sort) and an empty array."""
    x = np.random.default_rng(size + top).integers(0, top + 1, size)
    got = distinct(x)
    assert got.dtype == np.int64 and np.array_equal(got, np.unique(x))


def test_a_releases_distinct_subjects_are_numpy_unique_of_the_packed_subjects() -> None:
    """Budget subjects (window index << USER_BITS | user) found by their dense renumbering."""
    rng = np.random.default_rng(5)
    pair_window, user = rng.integers(0, 7, 30_000), rng.integers(1, 4_000, 30_000)
    occ = SimpleNamespace(grid=pair_window, user=user)  # the pairs' grids and users
    grids = [SimpleNamespace(slot_start=DAY0 + timedelta(days=int(w))) for w in range(7)]
    windows, subjects, wanted = charges._subjects(DAILY, grids, occ)  # type: ignore[arg-type]
    assert len(windows) == 7
    assert np.array_equal(subjects, (pair_window << USER_BITS) | user)
    assert np.array_equal(wanted, np.unique(subjects))
    one_day = [SimpleNamespace(slot_start=DAY0)] * 7  # every grid in one window: index 0
    windows, subjects, wanted = charges._subjects(DAILY, one_day, occ)  # type: ignore[arg-type]
    assert len(windows) == 1 and np.array_equal(subjects, user)
    assert np.array_equal(wanted, np.unique(user))
