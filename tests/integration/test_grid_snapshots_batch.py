"""Batched snapshot loading (app/datasets/grid_batch.load_grid_snapshots): one query for
every cache miss, the same arrays as one load per grid, stale versions refused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.datasets.grid_batch import load_grid_snapshots
from app.datasets.grid_store import (
    DEFAULT_CACHE_BYTES,
    GridChanged,
    clear_grid_cache,
    configure_grid_cache,
    grid_cache_info,
    read_grid_snapshot,
)
from app.datasets.models import Grid
from tests.helpers import create_dataset, make_csv, upload_csv


def _city(n_users: int) -> str:
    rows = []
    for u in range(n_users):
        for j in range(3 + u % 4):  # users in one to three cells, several records each
            lat = 12.97 + 0.01 * ((u + j) % 3)
            rows.append(
                (f"u{u}", f"2016-11-25T10:{(7 * u + j) % 60:02d}:00Z", lat, 77.59, j + u % 7)
            )
    return make_csv(rows)


@contextmanager
def _city_grids(client: TestClient, app: FastAPI, n_users: int) -> Iterator[tuple[Session, list]]:
    """A session and the grids of a city of ``n_users`` uploaded, the grid cache empty."""
    ds = create_dataset(client)
    upload_csv(client, ds["id"], _city(n_users))
    with app.state.sessionmaker() as session:
        grids = session.execute(select(Grid).where(Grid.dataset_id == ds["id"])).scalars().all()
        clear_grid_cache()
        yield session, list(grids)


def test_batch_equals_one_load_per_grid_and_uses_the_cache(
    client: TestClient, app: FastAPI
) -> None:
    with _city_grids(client, app, 40) as (session, grids):
        assert len(grids) == 3
        half = load_grid_snapshots(session, grids[:1])  # one cached, two missing
        misses = grid_cache_info()["misses"]
        batch = load_grid_snapshots(session, grids)
        assert grid_cache_info()["misses"] == misses + 2 and batch[0] is half[0]
        for grid, arrays in zip(grids, batch, strict=True):
            one = read_grid_snapshot(session, grid)
            assert (arrays.grid_id, arrays.version) == (grid.id, grid.version)
            for name in ("user_ids", "counts", "values"):
                assert np.array_equal(getattr(arrays, name), getattr(one, name))
            assert arrays.counts.sum() == grid.n_records
        assert load_grid_snapshots(session, []) == []


def test_batch_refuses_a_grid_that_changed(client: TestClient, app: FastAPI) -> None:
    with _city_grids(client, app, 10) as (session, grids):
        stale = grids[-1]
        session.expunge(stale)
        stale.version -= 1  # the caller saw an older version than the stored snapshot's
        with pytest.raises(GridChanged, match="changed while it was read"):
            load_grid_snapshots(session, [*grids[:-1], stale])


def test_a_read_larger_than_the_cache_leaves_the_cache_alone(
    client: TestClient, app: FastAPI
) -> None:
    with _city_grids(client, app, 40) as (session, grids):
        hot = load_grid_snapshots(session, grids[:1])[0]
        total = sum(a.nbytes for a in load_grid_snapshots(session, grids))
        clear_grid_cache()
        budget = total - hot.nbytes - 1  # the hot grid fits, a read of the others does not
        assert budget >= hot.nbytes
        configure_grid_cache(budget)
        try:
            assert load_grid_snapshots(session, grids[:1])[0] is not hot  # read, cached
            hot = load_grid_snapshots(session, grids[:1])[0]
            before = grid_cache_info()
            big = load_grid_snapshots(session, grids[1:] + grids[:1])
            after = grid_cache_info()
            assert big[-1] is hot  # the hot grid is served from the cache
            assert (after["entries"], after["bytes"]) == (before["entries"], before["bytes"])
            assert load_grid_snapshots(session, grids[:1])[0] is hot  # and still there
        finally:
            configure_grid_cache(DEFAULT_CACHE_BYTES)
