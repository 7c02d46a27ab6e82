"""CSV ingestion end to end: exact tallies on a real day,
look-ups, concurrency, grids and their snapshots (all or nothing, streaming and
idempotency: ``test_ingest_atomic.py``)."""

from __future__ import annotations

import csv
import hashlib
import hmac
import math
from collections import defaultdict
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import h3
import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.datasets.models import DatasetUser, Grid, GridSnapshot
from app.datasets.service import get_dataset, get_grid_by_public_id, load_grid_snapshot
from app.db.migrate import upgrade
from app.kit.errors import NotFound
from app.uploads import ingestor as ingestor_module
from app.uploads import service as upload_module
from tests.helpers import create_dataset, make_csv, upload_csv
from tests.integration.ingest_support import (
    CAPMETRICS,
    CAPMETRICS_COLUMNS,
    all_grids,
    counts,
    rows_csv,
)

# --------------------------------------------------------------------------- CapMetrics


@pytest.fixture(scope="module")
def capmetrics_expected() -> dict:
    """An independent count over the CSV with csv + h3 + zoneinfo (no project code)."""
    if not CAPMETRICS.exists():
        pytest.skip(f"CapMetrics data not found at {CAPMETRICS.resolve()} (../shared/data)")
    chicago = ZoneInfo("America/Chicago")
    seen: set[tuple[str, datetime]] = set()
    per_grid: dict[tuple[str, str], dict[str, list[tuple[datetime, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    accepted = duplicates = rejected = clamped = 0
    with CAPMETRICS.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            try:
                when = datetime.fromisoformat(row["timestamp"]).astimezone(UTC)
                lat, lon = float(row["latitude"]), float(row["longitude"])
                speed = float(row["speed"])
            except ValueError:
                rejected += 1
                continue
            if not row["vehicle_id"].strip() or not (-90 <= lat <= 90 and -180 <= lon <= 180):
                rejected += 1
                continue
            if not math.isfinite(speed):
                rejected += 1
                continue
            value = min(max(speed, 0.0), 30.0)
            clamped += value != speed
            key = (row["vehicle_id"].strip(), when)
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            accepted += 1
            local = when.astimezone(chicago).replace(minute=0, second=0, microsecond=0)
            cell = h3.latlng_to_cell(lat, lon, 8)
            per_grid[(cell, local.isoformat())][key[0]].append((when, value))
    return {
        "accepted": accepted,
        "duplicates": duplicates,
        "rejected": rejected,
        "clamped": clamped,
        "grids": per_grid,
    }


def test_capmetrics_day_matches_an_independent_count(
    client: TestClient, app: FastAPI, capmetrics_expected: dict
) -> None:
    ds = create_dataset(
        client, value_bound=30, h3_resolution=8, timeslot_minutes=60, timezone="America/Chicago"
    )
    answer = upload_csv(client, ds["id"], CAPMETRICS.read_bytes(), **CAPMETRICS_COLUMNS)
    exp = capmetrics_expected
    for k in ("accepted", "duplicates", "rejected", "clamped"):
        assert answer[k] == exp[k], k
    assert answer["grids_updated"] == len(exp["grids"])

    grids = all_grids(client, ds["id"])
    got = {(g["h3_cell"], g["slot_start"]): g for g in grids}
    assert set(got) == set(exp["grids"])
    for key, users in exp["grids"].items():
        g = got[key]
        sizes = [len(v) for v in users.values()]
        assert (g["n_users"], g["n_records"], g["max_user_records"]) == (
            len(users),
            sum(sizes),
            max(sizes),
        ), key
    assert [(g["slot_start"], g["h3_cell"]) for g in grids] == sorted(
        (g["slot_start"], g["h3_cell"]) for g in grids
    )

    # the engine input of every grid: users by id, each user's values in time order
    secret = app.state.hash_secret
    with app.state.sessionmaker() as session:
        ids = dict(session.execute(select(DatasetUser.user_hash, DatasetUser.id)).all())
        snaps = {
            (cell, public_id): (version, g_version, u, c, v)
            for cell, public_id, g_version, version, u, c, v in session.execute(
                select(
                    Grid.h3_cell, Grid.public_id, Grid.version, GridSnapshot.version,
                    GridSnapshot.user_ids, GridSnapshot.counts, GridSnapshot.values,
                ).join(GridSnapshot, GridSnapshot.grid_id == Grid.id)
            )
        }  # fmt: skip
        assert len(snaps) == len(exp["grids"])
        for n, (key, users) in enumerate(exp["grids"].items()):
            want = sorted(
                (ids[hmac.new(secret, u.encode(), hashlib.sha256).hexdigest()], sorted(v))
                for u, v in users.items()
            )
            version, g_version, user_buf, count_buf, value_buf = snaps[
                (key[0], got[key]["grid_id"])
            ]
            assert version == g_version == 1
            assert np.frombuffer(user_buf, "<i8").tolist() == [i for i, _ in want]
            assert np.frombuffer(count_buf, "<i8").tolist() == [len(v) for _, v in want]
            assert np.frombuffer(value_buf, "<f8").tolist() == [x for _, v in want for _, x in v]
            if n % 50 == 0:  # and through the loader the query code uses
                grid = get_grid_by_public_id(session, got[key]["grid_id"])
                arrays = load_grid_snapshot(session, grid)
                assert arrays.user_ids.tolist() == [i for i, _ in want]
                assert arrays.values.tolist() == [x for _, v in want for _, x in v]


# ------------------------------------------------------------------------- exact tallies


def test_one_of_each_fault_is_counted_exactly(client: TestClient) -> None:
    ds = create_dataset(client, value_bound=50)
    text = make_csv(
        [
            ("bus1", "2016-11-25T10:00:00Z", 12.97, 77.59, 20),  # 2 ok
            ("", "2016-11-25T10:01:00Z", 12.97, 77.59, 20),  # 3 missing user
            ("bus1", "not-a-time", 12.97, 77.59, 20),  # 4 bad timestamp
            ("bus1", "2016-11-25T10:02:00Z", 95.0, 77.59, 20),  # 5 latitude
            ("bus1", "2016-11-25T10:03:00Z", 12.97, 181.0, 20),  # 6 longitude
            ("bus1", "2016-11-25T10:04:00Z", 12.97, 77.59, "nan"),  # 7 non-finite value
            ("bus2", "2016-11-25T10:05:00Z", 12.97, 77.59, 75),  # 8 clamped
            ("bus1", "2016-11-25T10:00:00Z", 12.98, 77.60, 21),  # 9 duplicate of line 2
            ("bus2", "2016-11-25T10:06:00Z", 12.97, 77.59, 0),  # 10 ok (zero kept)
        ]
    )
    answer = upload_csv(client, ds["id"], text)
    assert answer["accepted"] == 3
    assert answer["rejected"] == 5
    assert answer["clamped"] == 1
    assert answer["duplicates"] == 1
    assert answer["dropped_zero"] == 0 and answer["rows"] == 9
    assert [e["line"] for e in answer["errors"]] == [3, 4, 5, 6, 7]
    assert all(e["reason"] for e in answer["errors"])
    (grid,) = all_grids(client, ds["id"])  # the duplicate's other cell was never created
    assert (grid["n_users"], grid["n_records"], grid["max_user_records"]) == (2, 3, 2)


def test_reject_mode_drop_zero_and_many_errors(client: TestClient) -> None:
    ds = create_dataset(client, value_bound=50, value_filters_public=True)
    good = [("a", f"2016-11-25T10:{i:02d}:00Z", 1.0, 1.0, v) for i, v in enumerate([0, 51, 7, 0])]
    answer = upload_csv(client, ds["id"], make_csv(good), drop_zero=True, out_of_range="reject")
    assert (answer["accepted"], answer["rejected"], answer["dropped_zero"], answer["clamped"]) == (
        1, 1, 2, 0,
    )  # fmt: skip
    bad = make_csv([("a", "x", 0, 0, 1)] * 250)
    answer = upload_csv(client, ds["id"], bad)
    assert answer["rejected"] == 250 and len(answer["errors"]) == 100
    assert answer["errors"][0]["line"] == 2 and answer["errors"][-1]["line"] == 101


def test_duplicates_across_uploads_and_grid_versions(client: TestClient, app: FastAPI) -> None:
    ds = create_dataset(client)
    first = upload_csv(client, ds["id"], rows_csv(30))
    assert (first["accepted"], first["duplicates"], first["grids_updated"]) == (30, 0, 1)
    again = upload_csv(client, ds["id"], rows_csv(30))
    assert (again["accepted"], again["duplicates"], again["grids_updated"]) == (0, 30, 0)
    (grid,) = all_grids(client, ds["id"])
    with app.state.sessionmaker() as session:
        g = get_grid_by_public_id(session, grid["grid_id"])
        assert g.version == 1
        before = load_grid_snapshot(session, g)
        assert load_grid_snapshot(session, g) is before  # cached
        assert before.counts.tolist() == [10, 10, 10] and before.values.size == 30

    more = upload_csv(client, ds["id"], rows_csv(40))  # 30 duplicates, 10 new, same grid
    assert (more["accepted"], more["duplicates"], more["grids_updated"]) == (10, 30, 1)
    with app.state.sessionmaker() as session:
        g = get_grid_by_public_id(session, grid["grid_id"])
        assert g.version == 2 and g.n_records == 40
        after = load_grid_snapshot(session, g)
        assert after.version == 2 and after.counts.tolist() == [14, 13, 13]
        assert not after.values.flags.writeable
        # each user's values are in time order (minute i carries value i % 60)
        first_user = after.values[: after.counts[0]]
        assert first_user.tolist() == sorted(first_user.tolist())


def test_epoch_and_naive_local_timestamps(client: TestClient) -> None:
    ds = create_dataset(client, timezone="America/Chicago")
    text = make_csv(
        [
            ("a", "1480096420", 30.42, -97.66, 1),  # 2016-11-25T11:53:40-06:00
            ("b", "2016-11-25T11:10:00", 30.42, -97.66, 2),  # naive = Chicago local
            ("c", "2016-11-25T17:20:00Z", 30.42, -97.66, 3),
        ]
    )
    assert upload_csv(client, ds["id"], text)["accepted"] == 3
    (grid,) = all_grids(client, ds["id"])
    assert grid["slot_start"] == "2016-11-25T11:00:00-06:00" and grid["n_users"] == 3


def test_user_ids_are_stored_only_as_keyed_hashes(client: TestClient, app: FastAPI) -> None:
    ds = create_dataset(client)
    upload_csv(client, ds["id"], make_csv([("VIN-12345", "2016-11-25T10:00:00Z", 1, 1, 1)]))
    with app.state.sessionmaker() as session:
        (stored,) = session.scalars(select(DatasetUser.user_hash)).all()
        grids = session.scalars(select(Grid)).all()
    expected = hmac.new(app.state.hash_secret, b"VIN-12345", hashlib.sha256).hexdigest()
    assert stored == expected and "VIN" not in stored
    assert all("VIN" not in (g.public_id + g.h3_cell) for g in grids)


# ---------------------------------------------------------------------------- look-ups


def test_lookups_raise_not_found(client: TestClient, app: FastAPI) -> None:
    create_dataset(client)
    with app.state.sessionmaker() as session:
        for bad in ("", "x" * 40, "no such grid!", "AAAAAAAAAAAAAAAA"):
            with pytest.raises(NotFound):
                get_grid_by_public_id(session, bad)
        for bad in (0, 10**12, "abc", 424242):
            with pytest.raises(NotFound):
                get_dataset(session, bad)


# -------------------------------------------------------------------------- concurrency


def test_concurrent_uploads_to_one_dataset_are_serialised(client: TestClient, app: FastAPI) -> None:
    """Two sessions upload overlapping files at once: every row is stored exactly once
    and the tallies add up (the dataset lock serialises them)."""
    import threading

    from app.uploads.service import UploadOptions, upload_records

    ds = create_dataset(client)
    body = rows_csv(300).encode()
    answers: list[dict] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def run() -> None:
        try:
            barrier.wait()
            with app.state.sessionmaker.begin() as session:
                answer, _ = upload_records(
                    session, ds["id"], [body], UploadOptions(), hash_secret=app.state.hash_secret
                )
            answers.append(answer)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(a["accepted"] for a in answers) == [0, 0, 300]
    assert sum(a["duplicates"] for a in answers) == 600
    assert counts(app)["records"] == 300
    (grid,) = all_grids(client, ds["id"])
    assert grid["n_records"] == 300


def test_snapshot_paths_agree(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New grids are built from the rows kept in memory, or spilled to temporary files
    (large uploads), or read back from the database (batches that met duplicates of
    stored rows): the results are identical."""
    points = [(12.97, 77.59), (12.99, 77.70), (13.05, 77.50)]
    rows = [
        (
            f"bus{i % 5}",
            f"2016-11-25T{9 + i % 2:02d}:{i % 60:02d}:{i % 7:02d}Z",
            *points[i % 3],
            i % 50,
        )
        for i in range(300)
    ]
    rows += rows[::7]  # duplicates far from their first occurrence: other batches
    text = make_csv(rows)

    def snapshot_of(dataset_id: int) -> dict:
        out = {}
        with app.state.sessionmaker() as session:
            for g in all_grids(client, dataset_id):
                a = load_grid_snapshot(session, get_grid_by_public_id(session, g["grid_id"]))
                out[(g["h3_cell"], g["slot_start"])] = (
                    g["n_users"], g["n_records"], g["max_user_records"],
                    a.counts.tolist(), a.values.tolist(),
                )  # fmt: skip
        return out

    spills: list[int] = []
    real_spill = ingestor_module.NewGridRows._spill

    def spy(self, rows):
        spills.append(len(rows))
        return real_spill(self, rows)

    monkeypatch.setattr(ingestor_module.NewGridRows, "_spill", spy)
    monkeypatch.setattr(ingestor_module, "STORE_GRIDS", 4)  # several writes of grids
    results = []
    for batch_rows, memory_rows in ((50_000, 10**9), (50_000, 5), (20, 10**9), (20, 30)):
        monkeypatch.setattr(upload_module, "BATCH_ROWS", batch_rows)
        monkeypatch.setattr(ingestor_module, "MEMORY_REBUILD_ROWS", memory_rows)
        ds = create_dataset(client)
        spills.clear()
        answer = upload_csv(client, ds["id"], text)
        assert (answer["accepted"], answer["duplicates"]) == (300, len(rows) - 300)
        assert bool(spills) == (memory_rows < 300)
        results.append(snapshot_of(ds["id"]))
    assert len(results[0]) == 6
    assert results[0] == results[1] == results[2] == results[3]


def test_upload_lock_blocks_uploads_not_queries(postgres_url: str) -> None:
    """An upload holds the dataset row FOR NO KEY UPDATE: a second upload
    waits, a query's FOR KEY SHARE does not."""
    from sqlalchemy.exc import OperationalError

    from app.datasets.models import Dataset
    from app.datasets.repository import DatasetRepository
    from app.db.engine import make_engine, make_sessionmaker

    upgrade(postgres_url)
    engine = make_engine(postgres_url)
    sessions = make_sessionmaker(engine)
    try:
        with sessions.begin() as s:
            ds = Dataset(
                name="lock", value_bound=1, h3_resolution=8, timeslot_minutes=60,
                timezone="UTC", budget_per_user=1, max_epsilon_per_query=1,
                on_exhausted="refuse",
            )  # fmt: skip
            s.add(ds)
            s.flush()
            dataset_id = ds.id
        with sessions.begin() as uploading:
            assert DatasetRepository(uploading).lock(dataset_id) is not None
            with sessions.begin() as query:
                query.connection().exec_driver_sql("SET LOCAL lock_timeout = '2s'")
                stmt = select(Dataset).where(Dataset.id == dataset_id)
                assert query.scalars(stmt.with_for_update(read=True, key_share=True)).first()
            with sessions() as other:
                other.connection().exec_driver_sql("SET lock_timeout = '200ms'")
                with pytest.raises(OperationalError):
                    DatasetRepository(other).lock(dataset_id)
    finally:
        engine.dispose()


def test_backfill_between_stored_rows(client: TestClient) -> None:
    """Rows older than a user's latest stored row are checked against the stored ones;
    newer rows go straight in: both counted exactly."""
    ds = create_dataset(client)
    row = lambda h: ("x", f"2016-11-25T{h}:00:00Z", 1.0, 1.0, 1)  # noqa: E731
    first = upload_csv(client, ds["id"], make_csv([row(10), row(12)]))
    assert (first["accepted"], first["duplicates"]) == (2, 0)
    second = upload_csv(client, ds["id"], make_csv([row(11), row(12), row(13), row(10)]))
    assert (second["accepted"], second["duplicates"]) == (2, 2)
    assert sum(g["n_records"] for g in all_grids(client, ds["id"])) == 4
