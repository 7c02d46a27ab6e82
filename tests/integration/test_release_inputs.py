"""A release's input as read now (the span's grids as rows, their snapshots in one query
decoded as columns, occupancy and coverage from the columns) against the per-grid
computation it replaced: ORM grids, one snapshot read per grid, the occupancy
concatenated grid by grid and the coverage by brute force."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import h3
import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.datasets.grid_batch import load_grid_batch
from app.datasets.grid_store import (
    DEFAULT_CACHE_BYTES,
    GridArrays,
    GridChanged,
    clear_grid_cache,
    configure_grid_cache,
    grid_cache_info,
    read_grid_snapshot,
)
from app.datasets.models import Dataset, Grid
from app.releases.inputs import release_input
from app.releases.repository import ReleaseRepository
from app.releases.request import parse_release
from app.releases.schemas import ReleaseIn
from tests.helpers import make_csv, upload_csv
from tests.integration.grid_fixtures import make_dataset

START = datetime(2024, 3, 5, 6, 0, tzinfo=UTC)
HOURS = 3
END = START + timedelta(hours=HOURS)
CENTRE = (30.2672, -97.7431)


def _csv(seed: int = 7) -> str:
    """Buses over ``HOURS`` hours (and one hour after them, outside the span): most near
    the centre (a few cells, many users each), some far out (cells of one or two)."""
    rng = np.random.default_rng(seed)  # test data
    rows = []
    for hour in range(HOURS + 1):
        for bus in range(60):
            spread = 0.002 if bus < 45 else 0.05
            lat, lon = CENTRE[0] + rng.normal(0, spread), CENTRE[1] + rng.normal(0, spread)
            for i in range(int(rng.integers(1, 9))):
                when = START + timedelta(hours=hour, seconds=40 * i + bus % 7)
                rows.append((f"bus{bus}", when.isoformat(), lat, lon, float(rng.uniform(0, 9))))
    return make_csv(rows)


@pytest.fixture(scope="module")
def buses(shared_client: TestClient) -> tuple[TestClient, int]:
    """The module's client and the dataset of the buses, uploaded once: the tests only read it
    (the coarser grids an adaptive input makes stay in the test's session, rolled back)."""
    ds = make_dataset(shared_client)
    assert upload_csv(shared_client, ds, _csv())["rejected"] == 0
    return shared_client, ds


@pytest.fixture
def city(buses: tuple[TestClient, int]) -> Iterator[tuple[Session, Dataset]]:
    """A session (never committed) and the dataset of the buses, the grid cache empty (and
    restored)."""
    client, ds = buses
    clear_grid_cache()
    try:
        with client.app.state.sessionmaker() as session:
            dataset = session.get(Dataset, ds)
            assert dataset is not None
            yield session, dataset
            session.rollback()
    finally:
        configure_grid_cache(DEFAULT_CACHE_BYTES)
        clear_grid_cache()


def _orm_span(session: Session, dataset_id: int) -> list[Grid]:
    """The span's grids as the ORM read them before."""
    return list(
        session.scalars(
            select(Grid)
            .where(Grid.dataset_id == dataset_id, Grid.slot_minutes == 0)
            .where(Grid.slot_start >= START, Grid.slot_start < END, Grid.n_records > 0)
            .order_by(Grid.slot_start, Grid.h3_cell)
        )
    )


def _same_arrays(got: GridArrays, want: GridArrays) -> None:
    assert (got.grid_id, got.version) == (want.grid_id, want.version)
    for name in ("user_ids", "counts", "values"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b) and not a.flags.writeable


def test_span_rows_are_the_orm_grids(city: tuple[Session, Dataset]) -> None:
    session, dataset = city
    rows = ReleaseRepository(session).grids_in_span(dataset.id, START, END)
    orm = _orm_span(session, dataset.id)
    assert len({g.slot_start for g in orm}) == HOURS and len(orm) > 2 * HOURS
    fields = [(g.id, g.public_id, g.h3_cell, g.slot_start, g.n_users, g.version) for g in orm]
    assert [tuple(r) for r in rows] == fields
    assert all(r.slot_start.tzinfo is UTC for r in rows)  # as UTCDateTime reads them


@pytest.mark.parametrize("cache_bytes", [DEFAULT_CACHE_BYTES, 0])
def test_a_batch_is_the_per_grid_reads(city: tuple[Session, Dataset], cache_bytes: int) -> None:
    """Cached grid by grid when the read fits the cache, else decoded as joined columns
    (and not cached): either way each grid's arrays are those of its own read."""
    session, dataset = city
    configure_grid_cache(cache_bytes)
    grids = ReleaseRepository(session).grids_in_span(dataset.id, START, END)
    batch = load_grid_batch(session, grids)
    assert (batch.joined is None) == (cache_bytes > 0)
    assert grid_cache_info()["entries"] == (len(grids) if cache_bytes else 0)
    for grid, arrays in zip(grids, batch.arrays, strict=True):
        _same_arrays(arrays, read_grid_snapshot(session, grid))
    cols = batch.columns
    assert np.array_equal(cols.user_ids, np.concatenate([a.user_ids for a in batch.arrays]))
    assert np.array_equal(cols.counts, np.concatenate([a.counts for a in batch.arrays]))
    assert np.array_equal(cols.values, np.concatenate([a.values for a in batch.arrays]))
    sizes = [a.user_ids.size for a in batch.arrays]
    assert cols.pairs.tolist() == np.cumsum([0, *sizes]).tolist()
    assert cols.records.tolist() == np.cumsum([0, *(a.values.size for a in batch.arrays)]).tolist()
    if cache_bytes == 0:
        assert all(np.shares_memory(a.values, cols.values) for a in batch.arrays)
    else:
        hits = grid_cache_info()["hits"]
        again = load_grid_batch(session, grids)
        assert all(a is b for a, b in zip(again.arrays, batch.arrays, strict=True))
        assert grid_cache_info()["hits"] == hits + len(grids)


def test_hits_are_served_beside_a_columnar_read(city: tuple[Session, Dataset]) -> None:
    session, dataset = city
    grids = ReleaseRepository(session).grids_in_span(dataset.id, START, END)
    small = sorted(range(len(grids)), key=lambda i: grids[i].n_users)[:2]
    hot = {i: read_grid_snapshot(session, grids[i]) for i in small}  # cached
    configure_grid_cache(sum(a.nbytes for a in hot.values()))  # the others outsize it
    before = grid_cache_info()
    batch = load_grid_batch(session, grids)
    after = grid_cache_info()
    assert batch.joined is None and all(batch.arrays[i] is a for i, a in hot.items())
    assert after["hits"] == before["hits"] + 2
    assert after["misses"] == before["misses"] + len(grids) - 2
    assert (after["entries"], after["bytes"]) == (before["entries"], before["bytes"])
    for grid, arrays in zip(grids, batch.arrays, strict=True):
        _same_arrays(arrays, read_grid_snapshot(session, grid))


@pytest.mark.parametrize("cache_bytes", [DEFAULT_CACHE_BYTES, 0])
def test_a_changed_grid_is_refused(city: tuple[Session, Dataset], cache_bytes: int) -> None:
    session, dataset = city
    configure_grid_cache(cache_bytes)
    grids = ReleaseRepository(session).grids_in_span(dataset.id, START, END)
    stale = grids[3]._replace(version=grids[3].version - 1)
    with pytest.raises(GridChanged, match=f"grid {stale.public_id} changed while it was read"):
        load_grid_batch(session, [*grids[:3], stale, *grids[4:]])
    assert grid_cache_info()["entries"] == 0
    gone = grids[0]._replace(id=-1)  # no snapshot: empty arrays at the version seen
    arrays = load_grid_batch(session, [gone, *grids[1:]]).arrays[0]
    assert (arrays.grid_id, arrays.version, arrays.values.size) == (-1, gone.version, 0)


def _old_coverage(arrays: list[GridArrays], covered: list[bool]) -> tuple[float, float]:
    """The coverage as computed before (per-grid arrays concatenated, two sorts)."""
    if not arrays:
        return 0.0, 0.0
    inside = np.repeat(np.asarray(covered, dtype=bool), [a.counts.size for a in arrays])
    counts = np.concatenate([a.counts for a in arrays])
    users = np.concatenate([a.user_ids for a in arrays])
    records, kept = int(counts.sum()), int(counts[inside].sum())
    n_users, users_in = np.unique(users).size, np.unique(users[inside]).size
    return (kept / records if records else 0.0, users_in / n_users if n_users else 0.0)


def _covered_by(grids: list[Grid], released: list) -> list[bool]:
    """Whether each fine grid's cell lies in a released cell of its slot."""
    cells = {(g.slot_start, g.h3_cell) for g in released}
    resolutions = {h3.get_resolution(g.h3_cell) for g in released}
    return [
        any((g.slot_start, h3.cell_to_parent(g.h3_cell, r)) in cells for r in resolutions)
        for g in grids
    ]


@pytest.mark.parametrize(
    "extra",
    [
        {"min_users": 1},
        {"min_users": 3},  # grids of one or two users skipped
        {"min_users": 4, "partition": "adaptive", "coarsest_resolution": 6},
        {"min_users": 4, "partition": "adaptive", "max_user_cost": 2.0, "epsilon": None},
    ],
)
def test_release_input_is_the_per_grid_computation(
    city: tuple[Session, Dataset], extra: dict
) -> None:
    session, dataset = city
    body = ReleaseIn.model_validate(
        {"slot_start": START.isoformat(), "slots": HOURS, "epsilon": 0.5, **extra}
    )
    configure_grid_cache(0)  # the day release's path: columns, nothing cached
    inp = release_input(session, parse_release(body, dataset))
    fine = _orm_span(session, dataset.id)
    fine_arrays = [read_grid_snapshot(session, g) for g in fine]
    if body.partition == "fixed":
        covered = [g.n_users >= body.min_users for g in fine]
        want = [(g, a) for g, a, c in zip(fine, fine_arrays, covered, strict=True) if c]
    else:
        covered = _covered_by(fine, inp.grids)
        fine_of = {g.id: a for g, a in zip(fine, fine_arrays, strict=True)}
        want = [(g, fine_of.get(g.id) or read_grid_snapshot(session, g)) for g in inp.grids]
        assert any(h3.get_resolution(g.h3_cell) < 8 for g in inp.grids)
    assert 0 < sum(covered) < len(fine) or extra["min_users"] == 1
    assert [g.id for g in inp.span.grids] == [g.id for g in fine]
    assert [g.id for g in inp.grids] == [g.id for g, _ in want]
    assert [g.public_id for g in inp.grids] == [g.public_id for g, _ in want]
    for got, (_, arrays) in zip(inp.arrays, want, strict=True):
        _same_arrays(got, arrays)
    occ_users = [a.user_ids for _, a in want]
    sizes = [u.size for u in occ_users]
    assert inp.occ.user.tolist() == np.concatenate([np.empty(0, np.int64), *occ_users]).tolist()
    assert inp.occ.count.tolist() == np.concatenate([[], *(a.counts for _, a in want)]).tolist()
    assert inp.occ.grid.tolist() == np.repeat(np.arange(len(want)), sizes).tolist()
    assert inp.occ.bounds.tolist() == np.cumsum([0, *sizes]).tolist()
    assert all(x.dtype == np.int64 for x in (inp.occ.user, inp.occ.count, inp.occ.grid))
    assert (inp.coverage.records, inp.coverage.users) == _old_coverage(fine_arrays, covered)
    assert inp.skipped == len(fine) - sum(covered)
    assert (inp.joined is not None) == (body.partition == "fixed" and all(covered))
    assert inp.columns.pairs.tolist() == inp.occ.bounds.tolist()
    assert inp.columns.user_ids.tolist() == inp.occ.user.tolist()
    values = [a.values for _, a in want]
    assert np.array_equal(inp.columns.values, np.concatenate([np.empty(0), *values]))
    assert inp.columns.records.tolist() == np.cumsum([0, *(v.size for v in values)]).tolist()
