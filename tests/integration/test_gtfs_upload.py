"""GTFS-Realtime push: ``POST /datasets/{id}/records`` with a ``FeedMessage`` body has the
CSV upload's answer and guarantees (one transaction, ``Idempotency-Key``, value filters,
the body limit), names rejected entities, and gives the grids of the same positions
uploaded as CSV (a held-out CapMetrics day, when the shared data is present)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from google.transit import gtfs_realtime_pb2

from app.db.migrate import upgrade
from app.main import create_app
from app.uploads import service as upload_module
from app.uploads.repository import IngestRepository
from tests.conftest import ADMIN_KEY
from tests.gtfs_support import (
    contents,
    feed_message,
    feeds,
    held_out_rows,
    made_rows,
    positions_csv,
)
from tests.helpers import create_dataset, upload_csv
from tests.integration.ingest_support import NOTHING, _error, counts

PROTOBUF = {"content-type": "application/x-protobuf"}
CAPMETRICS_DATASET = {"value_bound": 30.0, "timezone": "America/Chicago"}


def post_feed(client: TestClient, dataset_id: int, body: bytes, headers=None, **params):
    query = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items()}
    return client.post(
        f"/datasets/{dataset_id}/records",
        content=body,
        params=query,
        headers={**PROTOBUF, **(headers or {})},
    )


def push(client: TestClient, dataset_id: int, body: bytes, **params) -> dict:
    resp = post_feed(client, dataset_id, body, **params)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_a_feed_is_stored_like_the_same_positions_as_csv(client: TestClient, app) -> None:
    rows = made_rows(300)
    ds_feed = create_dataset(client, **CAPMETRICS_DATASET)["id"]
    ds_csv = create_dataset(client, **CAPMETRICS_DATASET)["id"]
    answer = push(client, ds_feed, feed_message(rows))
    expected = upload_csv(client, ds_csv, positions_csv(rows))
    assert answer == expected  # the same answer, field by field
    assert answer["accepted"] == len({(r["vehicle_id"], r["timestamp"]) for r in rows})
    assert contents(app, ds_feed) == contents(app, ds_csv) and contents(app, ds_feed)[1]
    again = push(client, ds_feed, feed_message(rows[:50]))  # already stored: duplicates
    assert (again["accepted"], again["duplicates"]) == (0, 50)


def _bad_feed() -> bytes:
    msg = gtfs_realtime_pb2.FeedMessage()
    msg.header.gtfs_realtime_version = "2.0"
    msg.header.timestamp = 1489672800
    for vid, lat, speed in [("ok", 30.3, 5.0), ("", 30.3, 5.0), ("far", 91.0, 5.0),
                            ("fast", 30.3, 99.0), ("zero", 30.3, 0.0)]:  # fmt: skip
        e = msg.entity.add()
        e.id = vid or "x"
        e.vehicle.vehicle.id = vid
        e.vehicle.position.latitude, e.vehicle.position.longitude = lat, -97.7
        e.vehicle.position.speed = speed
    e = msg.entity.add()
    e.id = "nopos"
    e.vehicle.vehicle.id = "nopos"
    e = msg.entity.add()
    e.id = "nospeed"
    e.vehicle.vehicle.id = "nospeed"
    e.vehicle.position.latitude, e.vehicle.position.longitude = 30.3, -97.7
    return msg.SerializeToString()


def test_rejections_name_the_entity_and_vehicle(client: TestClient) -> None:
    ds = create_dataset(client, value_bound=30.0, value_filters_public=True)["id"]
    out = push(client, ds, _bad_feed(), out_of_range="reject", drop_zero=True)
    assert (out["rows"], out["accepted"], out["rejected"], out["dropped_zero"]) == (7, 1, 5, 1)
    errors = {e["line"]: e["reason"] for e in out["errors"]}
    assert sorted(errors) == [2, 3, 4, 6, 7]
    assert errors[2].startswith("entity 2: no vehicle id")
    assert errors[3].startswith("entity 3 (vehicle 'far'): latitude 91.0 outside")
    assert errors[4] == "entity 4 (vehicle 'fast'): speed 99.0 outside [0, 30.0]"
    assert errors[6].startswith("entity 6 (vehicle 'nopos'): no position")
    assert errors[7].startswith("entity 7 (vehicle 'nospeed'): no speed")
    clamped = push(client, create_dataset(client, value_bound=30.0)["id"], _bad_feed())
    assert (clamped["accepted"], clamped["clamped"], clamped["rejected"]) == (3, 1, 4)


def test_a_vehicle_id_that_is_not_utf8_rejects_its_entity(client: TestClient, app) -> None:
    """Protobuf strings are UTF-8; the bindings hand back the bytes of one that is not.
    Its entity is rejected by name, the feed's other entities stored."""
    rows = made_rows(3)
    marked = [{**r, "vehicle_id": "BAD" + r["vehicle_id"]} if i == 1 else r
              for i, r in enumerate(rows)]  # fmt: skip
    body = feed_message(marked).replace(b"BAD", b"\xff\xfeX")
    ds = create_dataset(client, **CAPMETRICS_DATASET)["id"]
    out = push(client, ds, body)
    assert (out["rows"], out["accepted"], out["rejected"]) == (3, 2, 1)
    assert [(e["line"], e["reason"]) for e in out["errors"]] == [
        (2, "entity 2: vehicle id is not UTF-8 text (vehicle.vehicle.id)")
    ]
    assert counts(app)["records"] == 2


def test_value_filters_follow_the_dataset_rule(client: TestClient, app: FastAPI) -> None:
    ds = create_dataset(client)["id"]
    for option in ({"drop_zero": True}, {"out_of_range": "reject"}):
        resp = post_feed(client, ds, _bad_feed(), **option)
        _error(resp, 400, "invalid_request")
        assert "value_filters_public" in resp.json()["error"]["message"]
    resp = post_feed(client, ds, _bad_feed(), user_col="vehicle_id")
    _error(resp, 400, "invalid_request")
    assert "user_col" in resp.json()["error"]["message"]
    assert counts(app) == {**NOTHING, "records": 0}


@pytest.fixture(scope="module")
def still_empty(shared_client: TestClient) -> int:
    """A dataset for the refused feeds, which share it: none may write a record."""
    return create_dataset(shared_client)["id"]


@pytest.mark.parametrize("body", [b"not a feed \xff\xfe", b"\x0a\x05\x0a", b"\x12"])
def test_garbage_is_a_400_that_writes_nothing(
    shared_client: TestClient, still_empty: int, body: bytes
) -> None:
    resp = post_feed(shared_client, still_empty, body)
    _error(resp, 400, "invalid_request")
    assert "not a GTFS-Realtime FeedMessage" in resp.json()["error"]["message"]
    assert counts(shared_client.app) == NOTHING


def test_a_feed_refused_after_its_entities_were_written_writes_nothing(
    client: TestClient, app, monkeypatch
) -> None:
    """The entities are read from the bytes, and written, before the bindings parse the
    body: a header they refuse (a truncated varint) refuses the feed at its end."""
    monkeypatch.setattr(upload_module, "BATCH_ROWS", 10)
    ds = create_dataset(client)["id"]
    resp = post_feed(client, ds, feed_message(made_rows(40)) + b"\x0a\x02\x18\xff")
    _error(resp, 400, "invalid_request")
    assert "not a GTFS-Realtime FeedMessage" in resp.json()["error"]["message"]
    assert counts(app) == NOTHING


def test_a_crash_leaves_nothing(client: TestClient, app, monkeypatch) -> None:
    def failing(self, rows, *, replace):
        raise RuntimeError("boom")

    monkeypatch.setattr(IngestRepository, "write_snapshots", failing)
    ds = create_dataset(client)["id"]
    _error(post_feed(client, ds, feed_message(made_rows(40))), 500, "internal")
    assert counts(app) == NOTHING


def test_idempotency_key(client: TestClient, app: FastAPI) -> None:
    ds = create_dataset(client)["id"]
    key = {"Idempotency-Key": "feed-0800"}
    body = feed_message(made_rows(30))
    first = post_feed(client, ds, body, headers=key)
    assert first.status_code == 200 and first.json()["accepted"] == 30
    before = counts(app)
    again = post_feed(client, ds, body, headers=key)
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    other = post_feed(client, ds, feed_message(made_rows(31)), headers=key)
    _error(other, 422, "idempotency_conflict")
    assert counts(app) == before


def test_a_feed_over_the_body_limit_is_413(settings) -> None:
    limited = settings.model_copy(update={"max_body_bytes": 2000})
    upgrade(limited.database_url)
    app = create_app(limited)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        ds = create_dataset(client)["id"]
        body = feed_message(made_rows(200))
        assert len(body) > 2000
        _error(post_feed(client, ds, body), 413, "payload_too_large")
        assert counts(app) == NOTHING


def test_openapi_documents_both_body_types(client: TestClient) -> None:
    op = client.get("/openapi.json").json()["paths"]["/datasets/{dataset_id}/records"]["post"]
    content = op["requestBody"]["content"]
    assert set(content) == {"text/csv", "application/x-protobuf"}
    assert content["application/x-protobuf"]["schema"]["format"] == "binary"
    assert "FeedMessage" in op["description"]


# ------------------------------------------------------------ a held-out day, as feeds


def check_feeds_give_the_csv_grids(client: TestClient, app: FastAPI, rows) -> None:
    ds_csv = create_dataset(client, **CAPMETRICS_DATASET)["id"]
    ds_feed = create_dataset(client, **CAPMETRICS_DATASET)["id"]
    as_csv = upload_csv(client, ds_csv, positions_csv(rows))
    bodies = feeds(rows)
    accepted = duplicates = 0
    for body in bodies:  # one FeedMessage per 30 s, pushed as the agency publishes them
        out = push(client, ds_feed, body)
        accepted, duplicates = accepted + out["accepted"], duplicates + out["duplicates"]
    assert (accepted, duplicates) == (as_csv["accepted"], as_csv["duplicates"])
    grids, records = contents(app, ds_feed)
    assert (grids, records) == contents(app, ds_csv)
    assert len(records) == as_csv["accepted"] > 1000 and len(bodies) > 50


def test_held_out_half_hour_pushed_as_feeds_gives_the_csv_grids(client, app) -> None:
    check_feeds_give_the_csv_grids(client, app, held_out_rows((7, 7.5)))


@pytest.mark.slow
def test_held_out_day_pushed_as_feeds_gives_the_csv_grids(client, app) -> None:
    check_feeds_give_the_csv_grids(client, app, held_out_rows(None))
