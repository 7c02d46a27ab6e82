"""Large uploads are parsed in a child process (``app.ingest.parse_process``): forced here
for small bodies (``PARSE_PROCESS_MIN_BYTES = 0``), they give the in-process answer,
records and grids, refuse malformed files with the same 400 and write nothing, replay a
retry, and a child killed mid-upload fails the upload, writes nothing and leaves no
process or thread behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from google.transit import gtfs_realtime_pb2

from app.ingest import parse_process
from app.uploads import service as upload_module
from app.uploads.service import UploadOptions, upload_records
from tests.gtfs_support import contents, feed_message, made_rows
from tests.helpers import create_dataset, make_csv, post_csv
from tests.integration.ingest_support import NOTHING, _error, counts, rows_csv, watch_inserts

PROTOBUF = {"content-type": "application/x-protobuf"}


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list:
    """The parsing processes started, in order (small batches: several per upload)."""
    started: list = []
    real = parse_process._context.Process

    def spy(*args, **kwargs):
        process = real(*args, **kwargs)
        started.append(process)
        return process

    monkeypatch.setattr(parse_process._context, "Process", spy)
    monkeypatch.setattr(upload_module, "BATCH_ROWS", 7)
    monkeypatch.setattr(parse_process, "SEND_BYTES", 1000)
    return started


def _post(client: TestClient, dataset_id: int, body: bytes, feed: bool, **kw):
    headers = {**PROTOBUF, **kw.pop("headers", {})} if feed else kw.pop("headers", None)
    if feed:
        return client.post(f"/datasets/{dataset_id}/records", content=body, headers=headers, **kw)
    return post_csv(client, dataset_id, body, headers=headers, **kw.get("params", {}))


def _both_ways(
    client: TestClient,
    app: FastAPI,
    monkeypatch: pytest.MonkeyPatch,
    children: list,
    body: bytes,
    *,
    feed: bool = False,
    dataset: dict | None = None,
    **params,
) -> tuple[tuple, tuple]:
    """Upload ``body`` to two new datasets, parsed here then in a child: each
    ``(status, answer, contents)``."""
    out = []
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(upload_module, "PARSE_PROCESS_MIN_BYTES", threshold)
        before = len(children)
        ds = create_dataset(client, **(dataset or {}))["id"]
        resp = _post(client, ds, body, feed, params=params)
        assert len(children) == before + (threshold == 0)
        out.append((resp.status_code, resp.json(), contents(app, ds)))
    return out[0], out[1]


def _gone(processes: list) -> None:
    """No parsing process or receiving thread left running."""
    for process in processes:
        with pytest.raises(ValueError, match="closed"):
            process.is_alive()  # closed: joined and released
    alive = {t.name for t in threading.enumerate()}
    assert "dpgate-parse-receiver" not in alive and "dpgate-ingest-writer" not in alive


def _mixed_csv() -> bytes:
    """Kept, clamped, zero, naive, epoch and rejected rows of many users and grids, with
    more rejections than are reported."""
    rows = []
    for i in range(400):
        minute, user = i % 60, f"bus{i % 13}"
        when = (
            f"2016-11-25T{8 + i % 5:02d}:{minute:02d}:{i % 7:02d}"  # naive: local
            if i % 3 == 0
            else str(1480082400 + 37 * i)
            if i % 3 == 1
            else f"2016-11-25T{8 + i % 5:02d}:{minute:02d}:00Z"
        )
        lat, lon, value = 30.2 + (i % 17) * 0.01, -97.7 - (i % 11) * 0.01, (i * 7) % 40 - 3
        if i % 4 == 0:
            when = "yesterday"
        elif i % 23 == 0:
            lat = 91.0
        elif i % 29 == 0:
            value = "nan"
        rows.append((user, when, lat, lon, value))
    rows += rows[::10]  # duplicates
    return make_csv(rows).encode()


@pytest.mark.parametrize(
    "params",
    [{}, {"drop_zero": "true"}, {"drop_zero": "true", "out_of_range": "reject"}],
    ids=["clamp", "drop-zero", "reject"],
)
def test_csv_in_a_child_is_the_csv_parsed_here(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, children: list, params
) -> None:
    here, child = _both_ways(
        client,
        app,
        monkeypatch,
        children,
        _mixed_csv(),
        dataset={"value_bound": 30, "timezone": "America/Chicago", "value_filters_public": True},
        **params,
    )
    assert here[0] == child[0] == 200
    answer = child[1]
    assert answer["rejected"] > 100 and len(answer["errors"]) == 100
    assert answer["accepted"] and answer["duplicates"] and answer["grids_updated"] > 10
    assert answer["clamped" if "out_of_range" not in params else "rejected"]
    assert bool(answer["dropped_zero"]) == ("drop_zero" in params)
    assert child == here  # the answer, every grid and every record
    _gone(children)


def test_feed_in_a_child_is_the_feed_parsed_here(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, children: list
) -> None:
    msg = gtfs_realtime_pb2.FeedMessage()
    msg.ParseFromString(feed_message(made_rows(200), header_ts=1480082400))
    for i, entity in enumerate(msg.entity):
        if i % 11 == 0:
            entity.vehicle.position.ClearField("speed")
        elif i % 13 == 0:
            entity.vehicle.ClearField("timestamp")  # the header's
        elif i % 17 == 0:
            entity.vehicle.position.latitude = 95.0
        elif i % 19 == 0:
            entity.vehicle.vehicle.id = ""
        elif i % 5 == 0:
            entity.vehicle.position.speed = 45.0 if i % 2 else 0.0
    here, child = _both_ways(
        client,
        app,
        monkeypatch,
        children,
        msg.SerializeToString(),
        feed=True,
        dataset={"value_bound": 30, "value_filters_public": True},
        drop_zero="true",
    )
    assert here[0] == child[0] == 200
    answer = child[1]
    assert answer["rejected"] > 20 and answer["clamped"] and answer["dropped_zero"]
    assert answer["errors"][0]["reason"].startswith("entity 1 (vehicle '8900'): no speed")
    assert child == here
    _gone(children)


@pytest.mark.parametrize(
    ("body", "feed"),
    [
        (b"user_id,timestamp,lat,lon\nu,2016-11-25T10:00:00Z,1,1\n", False),  # a column short
        (rows_csv(200).encode() + b"u,2016-11-25T11:00:00Z,1,1,\xc3\x28\n", False),  # late
        (b"", False),
        (b"not a feed \xff\xfe", True),
    ],
    ids=["missing-column", "utf8-after-batches", "empty", "feed"],
)
def test_malformed_is_the_same_400_and_writes_nothing(
    client: TestClient,
    app: FastAPI,
    monkeypatch: pytest.MonkeyPatch,
    children: list,
    body: bytes,
    feed: bool,
) -> None:
    here, child = _both_ways(client, app, monkeypatch, children, body, feed=feed)
    assert here[0] == child[0] == 400
    assert child[1] == here[1] and child[1]["error"]["code"] == "invalid_request"
    assert counts(app) == {**NOTHING}
    _gone(children)


def test_retry_in_a_child_replays(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, children: list
) -> None:
    monkeypatch.setattr(upload_module, "PARSE_PROCESS_MIN_BYTES", 0)
    ds = create_dataset(client)["id"]
    key = {"Idempotency-Key": "big-upload"}
    first = post_csv(client, ds, rows_csv(90), headers=key)
    assert first.status_code == 200 and first.json()["accepted"] == 90
    before = counts(app)
    again = post_csv(client, ds, rows_csv(90), headers=key)
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    _error(post_csv(client, ds, rows_csv(91), headers=key), 422, "idempotency_conflict")
    assert counts(app) == before and len(children) == 1  # a replay parses nothing
    _gone(children)


def test_a_failed_write_stops_the_child_and_writes_nothing(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, children: list
) -> None:
    monkeypatch.setattr(upload_module, "PARSE_PROCESS_MIN_BYTES", 0)
    watch = watch_inserts(monkeypatch, fail_from=2)
    ds = create_dataset(client)["id"]
    _error(post_csv(client, ds, rows_csv(300)), 500, "internal")
    assert len(watch.calls) == 2 and len(children) == 1
    assert counts(app) == NOTHING
    _gone(children)


def _upload(app: FastAPI, dataset_id: int, chunks: Iterator[bytes]) -> None:
    with app.state.sessionmaker.begin() as session:
        upload_records(
            session,
            dataset_id,
            chunks,
            UploadOptions(),
            hash_secret=app.state.hash_secret,
            body_size=0,
        )


def _chunked(body: bytes, then=None) -> Iterator[bytes]:
    """``body`` in 400-byte chunks, calling ``then()`` after the fifth."""
    for n, start in enumerate(range(0, len(body), 400)):
        yield body[start : start + 400]
        if n == 4 and then is not None:
            then()


def test_a_killed_child_fails_the_upload_and_writes_nothing(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, children: list
) -> None:
    monkeypatch.setattr(upload_module, "PARSE_PROCESS_MIN_BYTES", 0)
    writes = watch_inserts(monkeypatch).calls
    ds = create_dataset(client)["id"]

    def kill() -> None:
        deadline = time.monotonic() + 10
        while not writes and time.monotonic() < deadline:  # batches were written
            time.sleep(0.01)
        assert writes
        os.kill(children[0].pid, signal.SIGKILL)

    body = rows_csv(600).encode()
    with pytest.raises(parse_process.ParseProcessError, match="exit code -9"):
        _upload(app, ds, _chunked(body, kill))
    assert counts(app) == NOTHING
    _gone(children)
    _upload(app, ds, _chunked(body))  # the next one works
    assert counts(app)["records"] == 600 and len(children) == 2
    _gone(children)


def test_a_failing_body_stops_the_child_and_writes_nothing(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, children: list
) -> None:
    monkeypatch.setattr(upload_module, "PARSE_PROCESS_MIN_BYTES", 0)
    ds = create_dataset(client)["id"]

    def disconnect() -> None:
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        _upload(app, ds, _chunked(rows_csv(600).encode(), disconnect))
    assert counts(app) == NOTHING and len(children) == 1
    _gone(children)


def test_a_hung_child_is_killed_and_writes_nothing(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, children: list
) -> None:
    monkeypatch.setattr(upload_module, "PARSE_PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(parse_process, "STALL_SECONDS", 1.0)
    ds = create_dataset(client)["id"]

    def freeze() -> None:
        os.kill(children[0].pid, signal.SIGSTOP)

    with pytest.raises(parse_process.ParseProcessError, match="sent nothing for 1 s"):
        _upload(app, ds, _chunked(rows_csv(3000).encode(), freeze))
    assert counts(app) == NOTHING
    _gone(children)
