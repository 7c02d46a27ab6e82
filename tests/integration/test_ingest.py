"""CSV ingestion end to end, on SQLite and Postgres: exact tallies, all-or-nothing,
idempotency, streaming, grids and their snapshots."""

from __future__ import annotations

import csv
import hashlib
import hmac
import math
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import anyio
import h3
import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.datasets import upload as upload_module
from app.datasets.models import DatasetUser, Grid, GridSnapshot, Record, Upload
from app.datasets.repository import IngestRepository
from app.datasets.service import get_dataset, get_grid_by_public_id, load_grid_snapshot
from app.db.migrate import upgrade
from app.errors import NotFound
from app.main import create_app
from tests.conftest import ADMIN_KEY, DATABASES
from tests.helpers import create_dataset, make_csv, post_csv, upload_csv

CAPMETRICS = Path(__file__).resolve().parents[2] / "../shared/data/capmetrics/2016-11-25.csv"
CAPMETRICS_COLUMNS = {
    "user_col": "vehicle_id",
    "time_col": "timestamp",
    "lat_col": "latitude",
    "lon_col": "longitude",
    "value_col": "speed",
}


def _error(resp, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == code


def counts(app: FastAPI) -> dict[str, int]:
    """Rows per ingestion table (to check that nothing was written)."""
    with app.state.sessionmaker() as session:
        return {
            m.__tablename__: session.scalar(select(func.count()).select_from(m))
            for m in (Record, Grid, GridSnapshot, DatasetUser, Upload)
        }


NOTHING = {"records": 0, "grids": 0, "grid_snapshots": 0, "dataset_users": 0, "uploads": 0}


def all_grids(client: TestClient, dataset_id: int) -> list[dict]:
    out: list[dict] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(
            f"/datasets/{dataset_id}/grids", params={"limit": 10000, "offset": offset}
        ).json()
        out += page["grids"]
        offset = page["next"]
    return out


def rows_csv(n: int, user: str = "u", start_min: int = 0) -> str:
    return make_csv(
        (
            f"{user}{i % 3}",
            f"2016-11-25T10:{(start_min + i) % 60:02d}:{i // 60:02d}Z",
            12.97,
            77.59,
            i % 60,
        )
        for i in range(n)
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


# ----------------------------------------------------------------------- all or nothing


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"user_id,timestamp,lat,lon\nu,2016-11-25T10:00:00Z,1,1\n",  # no value column
        b"user_id;timestamp;lat;lon;value\nu;2016-11-25T10:00:00Z;1;1;1\n",  # wrong delimiter
        b"user_id,timestamp,lat,lon,value\nu\xff,2016-11-25T10:00:00Z,1,1,1\n",  # not UTF-8
        b"user_id,timestamp,lat,lon,value\n" + b"u,2016-11-25T10:00:00Z,1,1," + b"9" * 2_000_000,
        b",".join(b"c%d" % i for i in range(5000)) + b"\n",
        b'user_id,timestamp,lat,lon,value\nu,"2016-11-25T10:00:00Z,1,1,1\n' + b"x" * 300_000,
    ],
    ids=["empty", "missing-column", "delimiter", "utf8", "huge-line", "columns", "quote"],
)
def test_malformed_files_are_refused_and_write_nothing(
    client: TestClient, app: FastAPI, body: bytes
) -> None:
    ds = create_dataset(client)
    _error(post_csv(client, ds["id"], body), 400, "invalid_request")
    assert counts(app) == NOTHING


def test_bad_utf8_after_written_batches_writes_nothing(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload_module, "BATCH_ROWS", 10)
    ds = create_dataset(client)
    body = rows_csv(200).encode() + b"u,2016-11-25T11:00:00Z,1,1,\xc3\x28\n"
    _error(post_csv(client, ds["id"], body), 400, "invalid_request")
    assert counts(app) == NOTHING


def test_bom_is_ignored(client: TestClient) -> None:
    ds = create_dataset(client)
    answer = upload_csv(client, ds["id"], b"\xef\xbb\xbf" + rows_csv(5).encode())
    assert answer["accepted"] == 5 and answer["rejected"] == 0


def test_crash_after_first_batch_leaves_nothing(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload_module, "BATCH_ROWS", 10)
    real = IngestRepository.insert_records
    calls: list[int] = []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("disk on fire")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(IngestRepository, "insert_records", failing)
    ds = create_dataset(client)
    _error(post_csv(client, ds["id"], rows_csv(100)), 500, "internal")
    assert len(calls) == 2
    assert counts(app) == NOTHING
    monkeypatch.setattr(IngestRepository, "insert_records", real)
    assert upload_csv(client, ds["id"], rows_csv(100))["accepted"] == 100


def test_crash_while_building_snapshots_leaves_nothing(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(self, rows, *, replace):
        raise RuntimeError("boom")

    monkeypatch.setattr(IngestRepository, "write_snapshots", failing)
    ds = create_dataset(client)
    _error(post_csv(client, ds["id"], rows_csv(20)), 500, "internal")
    assert counts(app) == NOTHING


def _stream(app: FastAPI, url: str, chunks: list[bytes], sent: list[int], **kw) -> httpx.Response:
    """POST ``chunks`` as a streamed (chunked, no Content-Length) body, counting them."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            sent.append(len(chunk))
            yield chunk
            await anyio.sleep(0)

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post(
                url,
                content=body(),
                headers={"Authorization": f"Bearer {ADMIN_KEY}", "content-type": "text/csv"},
                **kw,
            )

    return anyio.run(go)


def test_upload_streams_the_body(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload_module, "BATCH_ROWS", 20)
    sent: list[int] = []
    seen_at_first_write: list[int] = []
    real = IngestRepository.insert_records

    def spy(self, *args, **kwargs):
        if not seen_at_first_write:
            seen_at_first_write.append(len(sent))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(IngestRepository, "insert_records", spy)
    ds = create_dataset(client)
    text = rows_csv(600).encode()
    lines = text.splitlines(keepends=True)
    chunks = [b"".join(lines[i : i + 20]) for i in range(0, len(lines), 20)]
    resp = _stream(app, f"/datasets/{ds['id']}/records", chunks, sent)
    assert resp.status_code == 200, resp.text
    assert resp.json()["accepted"] == 600
    assert len(sent) == len(chunks) > 25
    assert seen_at_first_write[0] < len(chunks) // 2, seen_at_first_write  # long before the end


@pytest.fixture
def small_limit_app(settings) -> FastAPI:
    limited = settings.model_copy(update={"max_body_bytes": 6000})
    upgrade(limited.database_url)
    return create_app(limited)


def test_body_over_the_limit_mid_stream_is_413_and_writes_nothing(
    small_limit_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = small_limit_app
    monkeypatch.setattr(upload_module, "BATCH_ROWS", 10)
    writes: list[int] = []
    real = IngestRepository.insert_records

    def spy(self, *args, **kwargs):
        writes.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(IngestRepository, "insert_records", spy)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        ds = create_dataset(client)
        # declared Content-Length over the limit: refused before reading
        _error(post_csv(client, ds["id"], rows_csv(400)), 413, "payload_too_large")
        lines = rows_csv(400).encode().splitlines(keepends=True)
        chunks = [b"".join(lines[i : i + 10]) for i in range(0, len(lines), 10)]
        resp = _stream(app, f"/datasets/{ds['id']}/records", chunks, [])
        _error(resp, 413, "payload_too_large")
        assert writes, "a batch should have been written before the limit was reached"
        assert counts(app) == NOTHING
        assert upload_csv(client, ds["id"], rows_csv(20))["accepted"] == 20


# -------------------------------------------------------------------------- idempotency


def test_retry_with_the_same_idempotency_key_is_a_no_op(client: TestClient, app: FastAPI) -> None:
    ds = create_dataset(client)
    key = {"Idempotency-Key": "upload-2016-11-25"}
    first = post_csv(client, ds["id"], rows_csv(30), headers=key)
    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    before = counts(app)
    again = post_csv(client, ds["id"], rows_csv(30), headers=key)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert counts(app) == before
    other_body = post_csv(client, ds["id"], rows_csv(45), headers=key)  # another body
    assert other_body.status_code == 422
    assert other_body.json()["error"]["code"] == "idempotency_conflict"
    assert counts(app) == before
    other = upload_csv(client, ds["id"], rows_csv(30), headers={"Idempotency-Key": "other"})
    assert (other["accepted"], other["duplicates"]) == (0, 30)
    # keys are per dataset
    ds2 = create_dataset(client)
    assert upload_csv(client, ds2["id"], rows_csv(30), headers=key)["accepted"] == 30


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

    from app.datasets.upload import UploadOptions, upload_records

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
    real_spill = upload_module._NewGridRows._spill

    def spy(self, rows):
        spills.append(len(rows))
        return real_spill(self, rows)

    monkeypatch.setattr(upload_module._NewGridRows, "_spill", spy)
    monkeypatch.setattr(upload_module, "STORE_GRIDS", 4)  # several writes of grids
    results = []
    for batch_rows, memory_rows in ((50_000, 10**9), (50_000, 5), (20, 10**9), (20, 30)):
        monkeypatch.setattr(upload_module, "BATCH_ROWS", batch_rows)
        monkeypatch.setattr(upload_module, "MEMORY_REBUILD_ROWS", memory_rows)
        ds = create_dataset(client)
        spills.clear()
        answer = upload_csv(client, ds["id"], text)
        assert (answer["accepted"], answer["duplicates"]) == (300, len(rows) - 300)
        assert bool(spills) == (memory_rows < 300)
        results.append(snapshot_of(ds["id"]))
    assert len(results[0]) == 6
    assert results[0] == results[1] == results[2] == results[3]


@pytest.mark.postgres_only
@pytest.mark.skipif("postgres" not in DATABASES, reason="Postgres tests disabled")
def test_upload_lock_blocks_uploads_not_queries(postgres_url: str) -> None:
    """On Postgres an upload holds the dataset row FOR NO KEY UPDATE: a second upload
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
