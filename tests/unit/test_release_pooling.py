"""Grids pooled per privacy unit (``app.releases.pooling``) against a brute-force pooling
of small random grids, and the profile's dates and time-of-day slots across DST."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime

import numpy as np
import pytest

from app.datasets.grid_batch import GridColumns
from app.ledger.accounts import USER_BITS
from app.releases.pooling import _gathered, pool, units_of
from app.releases.profiles import Profile, chosen_dates


def _columns(grids: list[dict[int, list[float]]]) -> GridColumns:
    users, counts, values, pairs, records = [], [], [], [0], [0]
    for g in grids:
        for u in sorted(g):
            users.append(u)
            counts.append(len(g[u]))
            values += g[u]
        pairs.append(len(users))
        records.append(len(values))
    as_int = lambda x: np.array(x, dtype=np.int64)  # noqa: E731
    return GridColumns(
        as_int(users), as_int(counts), np.array(values, dtype=np.float64),
        as_int(pairs), as_int(records),
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_pool_is_the_brute_force_pooling(seed: int) -> None:
    rng = np.random.default_rng(seed)  # test data
    n_grids, n_targets = int(rng.integers(1, 9)), int(rng.integers(1, 4))
    grids = [
        {int(u): rng.uniform(0, 10, int(rng.integers(1, 4))).round(2).tolist()
         for u in rng.choice(6, size=int(rng.integers(0, 5)), replace=False)}
        for _ in range(n_grids)
    ]  # fmt: skip
    target = rng.integers(-1, n_targets, size=n_grids)
    window = rng.integers(0, 3, size=n_grids)
    want: list[dict[int, list[float]]] = [defaultdict(list) for _ in range(n_targets)]
    for g, t, w in zip(grids, target.tolist(), window.tolist(), strict=True):
        if t >= 0:
            for u, vs in g.items():
                want[t][(w << USER_BITS) | u] += vs  # source order: earlier grids first
    cols = _columns(grids)
    ranks, subjects = units_of(cols, window)
    assert subjects.tolist() == sorted(set(subjects.tolist()))  # ranks in subject order
    got = pool(cols, target, ranks, n_targets)
    for t in range(n_targets):
        p, q = got.pairs[t], got.pairs[t + 1]
        units = subjects[got.user_ids[p:q]].tolist()
        assert units == sorted(want[t])
        assert got.counts[p:q].tolist() == [len(want[t][u]) for u in units]
        values = got.values[got.records[t] : got.records[t + 1]].tolist()
        assert values == [v for u in units for v in want[t][u]]


@pytest.mark.parametrize("seed", range(5))
def test_units_given_or_read_from_sparse_user_ids_pool_alike(seed: int) -> None:
    """Users far apart (ids up to 2³¹) pool as their ranks do: no dense table is built."""
    rng = np.random.default_rng(seed)  # test data
    grids = [
        {int(u) * 400_000_000 + 3: rng.uniform(0, 10, int(rng.integers(1, 4))).tolist()
         for u in rng.choice(5, size=int(rng.integers(1, 5)), replace=False)}
        for _ in range(6)
    ]  # fmt: skip
    cols = _columns(grids)
    target = rng.integers(-1, 3, size=len(grids))
    ranks, subjects = units_of(cols, None)
    by_rank, by_user = pool(cols, target, ranks, 3), pool(cols, target, None, 3)
    assert subjects[by_rank.user_ids].tolist() == by_user.user_ids.tolist()
    assert by_rank.values.tolist() == by_user.values.tolist()
    assert by_rank.pairs.tolist() == by_user.pairs.tolist()


def test_a_profile_s_slots_on_daylight_saving_days() -> None:
    profile = Profile(
        date(2016, 3, 12), date(2016, 11, 7), "all",
        chosen_dates(date(2016, 3, 12), date(2016, 11, 7), "all"), 60, 2, 60,
        "America/Chicago", "day",
    )  # fmt: skip
    spring, fall = date(2016, 3, 13), date(2016, 11, 6)
    # 01:00 and 02:00 local: on the 13th of March 02:00 does not exist (03:00 CDT follows)
    assert profile.slot_of(datetime(2016, 3, 13, 7, tzinfo=UTC), spring) == 0  # 01:00 CST
    assert profile.slot_of(datetime(2016, 3, 13, 8, tzinfo=UTC), spring) is None  # 03:00 CDT
    # on the 6th of November 01:00 happens twice: both are the profile's first slot
    assert profile.slot_of(datetime(2016, 11, 6, 6, tzinfo=UTC), fall) == 0  # 01:00 CDT
    assert profile.slot_of(datetime(2016, 11, 6, 7, tzinfo=UTC), fall) == 0  # 01:00 CST
    assert profile.slot_of(datetime(2016, 11, 6, 8, tzinfo=UTC), fall) == 1  # 02:00 CST
    lo, hi = profile.day_range(fall)
    assert (lo, hi) == (datetime(2016, 11, 6, 6, tzinfo=UTC), datetime(2016, 11, 6, 9, tzinfo=UTC))
    assert len(profile.dates) == 241 and profile.windows()[0] == date(2016, 3, 12)
    weekends = chosen_dates(date(2024, 3, 1), date(2024, 3, 31), "weekends")
    assert len(weekends) == 10 and all(d.isoweekday() >= 6 for d in weekends)


@pytest.mark.parametrize("seed", range(6))
def test_records_are_gathered_run_by_run_or_at_once_alike(seed: int) -> None:
    """``_gathered`` copies runs of consecutive records as slices (a profile's whole source
    grids) and short runs by one gather: both are each pair's records in turn."""
    rng = np.random.default_rng(seed)
    values = rng.random(20_000)
    n = int(rng.integers(1, 60))
    counts = rng.integers(1, 300 if seed % 2 else 3, size=n)
    if seed % 3 == 0:  # runs: pairs one after another, with a few jumps between runs
        gaps = np.where(rng.random(n) < 0.1, 7, 0).cumsum()
        first = np.r_[0, np.cumsum(counts)[:-1]] + gaps
    else:
        first = rng.integers(0, values.size - 300, size=n)
    want = np.concatenate([values[a : a + b] for a, b in zip(first, counts, strict=True)])
    assert np.array_equal(_gathered(values, first, counts), want)
    assert _gathered(values, first[:0], counts[:0]).size == 0


@pytest.mark.parametrize("seed", range(10))
def test_sources_read_by_target_pool_in_place_as_in_date_order(seed: int) -> None:
    """A profile reads its day grids grouped by pooled grid (a stable sort: dates in order
    within); each unit then lies in one grid of its target, and pooling keeps the columns
    as they are (no copy of the values) with the same result as the date order gives."""
    rng = np.random.default_rng(seed)  # test data
    n_grids, n_targets = int(rng.integers(2, 12)), int(rng.integers(1, 4))
    grids = [
        {int(u): rng.uniform(0, 10, int(rng.integers(1, 4))).round(2).tolist()
         for u in rng.choice(6, size=int(rng.integers(1, 5)), replace=False)}
        for _ in range(n_grids)
    ]  # fmt: skip
    target = rng.integers(0, n_targets, size=n_grids)
    window = np.arange(n_grids)  # one window per day grid: a unit is in one source grid
    cols = _columns(grids)
    want = pool(cols, target, units_of(cols, window)[0], n_targets)
    by = np.argsort(target, kind="stable")
    cols = _columns([grids[i] for i in by.tolist()])
    got = pool(cols, target[by], units_of(cols, window[by])[0], n_targets)
    assert np.shares_memory(got.values, cols.values)
    for field in ("user_ids", "counts", "values", "pairs", "records"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field
