"""Snapshots after uploads (migration 0010: records keyed by user and time, no grid index)
equal those of the old path, a rebuild of every grid from all its records in
(grid, user, time) order, and of every coarser grid in (user, time) order: new grids,
stored grids extended by later rows, stored grids read back after earlier rows
(backfills), grids given only duplicates, daylight-saving days, spilled rows."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import h3
import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

import app.uploads.ingestor as ingestor_module
import app.uploads.service as upload_module
from app.datasets.coarse import GridLevel, _keys
from app.datasets.coarse_repository import FineGrid
from app.datasets.grid_store import summarise_grids
from app.datasets.models import Dataset
from tests.helpers import create_dataset, make_csv, upload_csv

CELLS = sorted(h3.cell_to_children(h3.latlng_to_cell(30.2672, -97.7431, 7), 8))[:3]
CELLS.append(h3.latlng_to_cell(30.45, -97.60, 8))
# 2024-11-03: clocks go back in Chicago (01:00-02:00 local happens twice)
T0 = datetime(2024, 11, 3, 4, 0, tzinfo=UTC)


def _rows(seed: int, n: int, start: datetime, hours: float, users: int = 6) -> list[tuple]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lat, lon = h3.cell_to_latlng(CELLS[int(rng.integers(0, len(CELLS)))])
        ts = start + timedelta(seconds=int(rng.integers(0, int(hours * 3600))))
        value = round(float(rng.uniform(0, 20)), 3)
        out.append((f"u{int(rng.integers(0, users))}", ts.isoformat(), lat, lon, value))
    return out


def _stored(app: FastAPI, dataset_id: int) -> dict[int, tuple]:
    """Every grid's ``(n_users, n_records, max, version, user_ids, counts, values)``."""
    with app.state.sessionmaker() as s:
        rows = s.execute(
            text(
                "SELECT g.id, g.n_users, g.n_records, g.max_user_records, g.version, "
                "s.version, s.user_ids, s.counts, s.values FROM grids g "
                "JOIN grid_snapshots s ON s.grid_id = g.id WHERE g.dataset_id = :d"
            ),
            {"d": dataset_id},
        ).all()
    out = {}
    for gid, nu, nr, mx, version, snap_version, users, counts, values in rows:
        assert snap_version == version
        out[gid] = (nu, nr, mx, version, bytes(users), bytes(counts), bytes(values))
    return out


def _old_path(app: FastAPI, dataset_id: int) -> dict[int, tuple]:
    """Every grid rebuilt from all its records as before 0010: the dataset's own grids in
    (grid, user, time) order, each coarser grid from its grids' records in (user, time)."""
    with app.state.sessionmaker() as s:
        dataset = s.get(Dataset, dataset_id)
        assert dataset is not None
        recs = s.execute(
            text(
                "SELECT grid_id, user_id, value FROM records WHERE dataset_id = :d "
                "ORDER BY grid_id, user_id, ts"
            ),
            {"d": dataset_id},
        ).all()
        grids = s.execute(
            text(
                "SELECT id, h3_cell, slot_start, version, slot_minutes FROM grids "
                "WHERE dataset_id = :d"
            ),
            {"d": dataset_id},
        ).all()
        fine = [FineGrid(g[0], g[1], g[2], g[3]) for g in grids if g[4] == 0]
        coarse = {(g[1], g[2], g[4]): g[0] for g in grids if g[4]}
        members: dict[int, list[int]] = defaultdict(list)
        for res, minutes in {(h3.get_resolution(c), m) for c, _, m in coarse}:
            keys = _keys(fine, dataset, GridLevel(res, minutes))
            for f, (cell, slot) in zip(fine, keys, strict=True):
                key = (cell, datetime.fromtimestamp(slot / 1e6, UTC), minutes)
                if key in coarse:
                    members[coarse[key]].append(f.id)
        by_user = s.execute(
            text(
                "SELECT grid_id, user_id, value FROM records WHERE dataset_id = :d "
                "ORDER BY user_id, ts"
            ),
            {"d": dataset_id},
        ).all()
    out = {}
    g, u, v = (np.array(c) for c in zip(*recs, strict=True))
    for sm in summarise_grids(g.astype(np.int64), u.astype(np.int64), v.astype(np.float64)):
        out[sm.grid_id] = sm
    for cid, ids in members.items():
        rows = [(cid, user, value) for gid, user, value in by_user if gid in set(ids)]
        g, u, v = (np.array(c) for c in zip(*rows, strict=True))
        (out[cid],) = summarise_grids(g, u.astype(np.int64), v.astype(np.float64))
    return {
        gid: (s.n_users, s.n_records, s.max_user_records, s.user_ids, s.counts, s.values)
        for gid, s in out.items()
    }


def _check(app: FastAPI, dataset_id: int) -> dict[int, tuple]:
    stored = _stored(app, dataset_id)
    expected = _old_path(app, dataset_id)
    assert {gid: (*t[:3], *t[4:]) for gid, t in stored.items()} == expected
    return stored


@pytest.mark.parametrize(
    ("batch_rows", "memory_rows", "store_grids"), [(50_000, 10**9, 5000), (13, 40, 3)]
)
def test_grids_equal_the_old_rebuild_from_all_records(
    client: TestClient,
    app: FastAPI,
    monkeypatch: pytest.MonkeyPatch,
    batch_rows: int,
    memory_rows: int,
    store_grids: int,
) -> None:
    monkeypatch.setattr(upload_module, "BATCH_ROWS", batch_rows)
    monkeypatch.setattr(ingestor_module, "MEMORY_REBUILD_ROWS", memory_rows)
    # a few grids per write: written on the helper thread while the next are summarised
    monkeypatch.setattr(ingestor_module, "STORE_GRIDS", store_grids)
    ds = create_dataset(client, timezone="America/Chicago")["id"]
    first = _rows(1, 300, T0, 6)
    answer = upload_csv(client, ds, make_csv(first + first[::9]))  # with repeats in the file
    assert answer["duplicates"] >= len(first[::9])
    _check(app, ds)
    # coarser grids exist now, so later uploads refresh them too
    for params in ({"h3_resolution": 7}, {"h3_resolution": 7, "slot_minutes": 120}):
        assert client.get(f"/datasets/{ds}/grids", params=params).status_code == 200
    before = _check(app, ds)

    # later rows only: stored grids extended from their snapshots, new grids built
    later = _rows(2, 200, T0 + timedelta(hours=5, minutes=59), 3)
    upload_csv(client, ds, make_csv(later))
    after_later = _check(app, ds)
    assert any(after_later[g][3] > before[g][3] for g in before)  # some stored grid changed

    # earlier rows between stored ones (backfills), some repeating stored records
    backfill = _rows(3, 150, T0, 8) + first[5:40:3] + later[:10]
    answer = upload_csv(client, ds, make_csv(backfill))
    assert answer["duplicates"] >= len(first[5:40:3]) + 10
    _check(app, ds)

    # only duplicates: nothing changes, no version moves
    unchanged = _stored(app, ds)
    answer = upload_csv(client, ds, make_csv(first[:50] + later[:50]))
    assert (answer["accepted"], answer["grids_updated"]) == (0, 0)
    assert _check(app, ds) == unchanged


def test_a_grid_given_only_duplicates_keeps_its_version(client: TestClient, app: FastAPI) -> None:
    """A vehicle's repeated timestamp is a duplicate even at another position (the first
    one stays); another vehicle at that timestamp, or the same one 1 µs later, is a record."""
    ds = create_dataset(client)["id"]
    a, b = (h3.cell_to_latlng(c) for c in CELLS[:2])
    t = "2016-11-25T10:00:00+00:00"
    assert upload_csv(client, ds, make_csv([("x", t, *a, 5)]))["accepted"] == 1
    grids = _stored(app, ds)
    answer = upload_csv(
        client,
        ds,
        make_csv(
            [
                ("x", t, *b, 7),  # same vehicle and time, elsewhere: a duplicate
                ("x", "2016-11-25T10:00:00.000001+00:00", *b, 7),
                ("y", t, *a, 9),
            ]
        ),
    )
    assert (answer["accepted"], answer["duplicates"]) == (2, 1)
    after = _check(app, ds)
    assert len(after) == 2
    (old_id,) = grids
    assert after[old_id][1] == 2 and after[old_id][3] == grids[old_id][3] + 1
    with app.state.sessionmaker() as s:
        values = s.execute(text("SELECT value FROM records ORDER BY user_id, ts")).scalars().all()
    assert values == [5, 7, 9]


def test_a_stored_grid_without_its_snapshot_is_rebuilt_from_all_its_records(
    client: TestClient, app: FastAPI
) -> None:
    """Not a state dpgate leaves (a grid's snapshot is written with it), but the rebuild
    does not rely on it: without the users a snapshot names, every record of the slot's
    time range is read, for the grid and for the coarser grids over it."""
    ds = create_dataset(client)["id"]
    first = _rows(4, 120, T0, 2)
    upload_csv(client, ds, make_csv(first))
    assert client.get(f"/datasets/{ds}/grids", params={"h3_resolution": 7}).status_code == 200
    with app.state.sessionmaker.begin() as s:
        s.execute(
            text(
                "DELETE FROM grid_snapshots WHERE grid_id IN (SELECT id FROM grids "
                "WHERE dataset_id = :d AND slot_minutes = 0)"
            ),
            {"d": ds},
        )
    # a few rows of one user into stored grids, before and after its latest one
    moved = [("u0", (datetime.fromisoformat(r[1]) + timedelta(seconds=1)).isoformat(), *r[2:])
             for r in first[::15]]  # fmt: skip
    assert upload_csv(client, ds, make_csv(moved))["accepted"] == len(moved)
    stored = _stored(app, ds)
    expected = _old_path(app, ds)
    changed = {g for g, t in stored.items() if t[3] > 1}
    assert changed and {g: (*stored[g][:3], *stored[g][4:]) for g in changed} == {
        g: expected[g] for g in changed
    }
