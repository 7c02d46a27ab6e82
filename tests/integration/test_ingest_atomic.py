"""CSV ingestion end to end: all or nothing (malformed files,
crashes, bodies over the limit), streaming and idempotent retries."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.db.migrate import upgrade
from app.main import create_app
from app.uploads import ingestor as ingestor_module
from app.uploads import service as upload_module
from app.uploads.repository import IngestRepository
from tests.conftest import ADMIN_KEY
from tests.helpers import create_dataset, make_csv, post_csv, upload_csv
from tests.integration.ingest_support import NOTHING, _error, counts, rows_csv, watch_inserts

# ----------------------------------------------------------------------- all or nothing


@pytest.fixture(scope="module")
def still_empty(shared_client: TestClient) -> int:
    """A dataset for the refused files, which share it: none may write a record."""
    return create_dataset(shared_client)["id"]


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
    shared_client: TestClient, still_empty: int, body: bytes
) -> None:
    _error(post_csv(shared_client, still_empty, body), 400, "invalid_request")
    assert counts(shared_client.app) == NOTHING


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
    watch = watch_inserts(monkeypatch, fail_from=2)
    ds = create_dataset(client)
    _error(post_csv(client, ds["id"], rows_csv(100)), 500, "internal")
    assert len(watch.calls) == 2
    assert counts(app) == NOTHING
    watch.fail_from = None
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


def test_crash_while_writing_grids_on_the_helper_thread_leaves_nothing(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingestor_module, "STORE_GRIDS", 2)  # grids written in parts of 2
    real = IngestRepository.insert_grids
    threads: list[str] = []

    def failing(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        if len(threads) == 3:
            raise RuntimeError("disk on fire")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(IngestRepository, "insert_grids", failing)
    ds = create_dataset(client)
    rows = [("u", f"2016-11-25T{h:02d}:00:00Z", 12.97, 77.59, 1) for h in range(12)]
    _error(post_csv(client, ds["id"], make_csv(rows)), 500, "internal")
    assert threads[2].startswith("dpgate-grids")
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
    writes = watch_inserts(monkeypatch).calls
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
