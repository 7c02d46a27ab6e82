"""GTFS-Realtime feeds become the CSV upload's records (app/ingest/gtfs_realtime.py).

Feeds are built from CapMetrics rows (the shared folder's, when present; else rows made
here), one ``FeedMessage`` per 30 s as the agency publishes them; the records read from
them equal the records read from the same positions written as CSV."""

from __future__ import annotations

from dataclasses import replace
from zoneinfo import ZoneInfo

import pytest
from google.transit import gtfs_realtime_pb2

from app.ingest.csv_records import ParseOptions, RecordReader
from app.ingest.gtfs_realtime import FeedFormatError, FeedReader
from tests.gtfs_support import capmetrics_rows, feeds, made_rows, positions_csv

OPTIONS = ParseOptions(
    value_bound=30.0, h3_resolution=8, timeslot_minutes=60, timezone=ZoneInfo("America/Chicago")
)


def _records(reader: RecordReader | FeedReader, batch: int = 10_000) -> list[tuple]:
    users: list[str] = []
    grids: list[tuple[int, int]] = []
    out = []
    for b in reader.batches(batch):
        users += b.new_users
        grids += b.new_grids
        out += [
            (users[u], t, grids[g][0], grids[g][1], v)
            for u, g, t, v in zip(
                b.user_codes.tolist(), b.grid_codes.tolist(), b.ts_us.tolist(),
                b.values.tolist(), strict=True,
            )
        ]  # fmt: skip
    return out


def _errors(reader: FeedReader) -> list[tuple[int, str]]:
    return [e for b in reader.batches(100) for e in b.errors]


def test_feeds_give_the_records_of_the_same_positions_as_csv() -> None:
    rows = (capmetrics_rows("2016-11-26") or made_rows(3000))[:3000]
    from_feeds = []
    for body in feeds(rows):
        from_feeds += _records(FeedReader(body, OPTIONS), batch=7)  # several batches per feed
    from_csv = _records(RecordReader(iter([positions_csv(rows)]), OPTIONS))
    assert len(from_feeds) == len(rows) == len(from_csv)
    assert sorted(from_feeds) == sorted(from_csv)


def _feed_of_bad_entities() -> bytes:
    msg = gtfs_realtime_pb2.FeedMessage()
    msg.header.gtfs_realtime_version = "2.0"
    msg.header.timestamp = 1480168800
    good = msg.entity.add()
    good.vehicle.vehicle.id = "v1"
    good.vehicle.position.latitude, good.vehicle.position.longitude = 30.3, -97.7
    good.vehicle.position.speed = 5.0  # the header's timestamp
    msg.entity.add().id = "an alert"  # 2: no vehicle
    e = msg.entity.add()  # 3: no id
    e.vehicle.position.latitude, e.vehicle.position.speed = 30.3, 1.0
    msg.entity.add().vehicle.vehicle.id = "v2"  # 4: no position
    e = msg.entity.add()  # 5: no speed
    e.vehicle.vehicle.id = "v3"
    e.vehicle.position.latitude = 30.3
    bad = [(95.0, 0.0, 1.0), (0.0, 181.0, 1.0), (0.0, 0.0, float("nan")), (0.0, 0.0, 31.0)]
    for i, (lat, lon, speed) in enumerate(bad):
        e = msg.entity.add()  # 6..9: latitude, longitude, not finite, value out of range
        e.vehicle.vehicle.id = f"w{i}"
        e.vehicle.position.latitude, e.vehicle.position.longitude = lat, lon
        e.vehicle.position.speed = speed
    return msg.SerializePartialToString()  # entities without ids: partial


def test_unusable_entities_are_rejected_by_number_and_vehicle_with_a_reason() -> None:
    options = replace(OPTIONS, reject_out_of_range=True)
    records = _records(FeedReader(_feed_of_bad_entities(), options))
    assert [r[0] for r in records] == ["v1"] and records[0][1] == 1480168800 * 10**6
    reasons = dict(_errors(FeedReader(_feed_of_bad_entities(), options)))
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert reasons[2].startswith("entity 2: not a vehicle position")
    assert reasons[3].startswith("entity 3: no vehicle id")
    assert reasons[4] == "entity 4 (vehicle 'v2'): no position (vehicle.position is missing)"
    assert reasons[5].startswith("entity 5 (vehicle 'v3'): no speed")
    assert reasons[6].startswith("entity 6 (vehicle 'w0'): latitude 95.0 outside")
    assert reasons[7].startswith("entity 7 (vehicle 'w1'): longitude 181.0 outside")
    assert reasons[8].startswith("entity 8 (vehicle 'w2'): non-finite speed")
    assert reasons[9] == "entity 9 (vehicle 'w3'): speed 31.0 outside [0, 30.0]"


def test_clamping_and_drop_zero_as_for_csv() -> None:
    msg = gtfs_realtime_pb2.FeedMessage()
    for i, speed in enumerate((0.0, -2.0, 45.0, 7.5)):
        e = msg.entity.add()
        e.vehicle.vehicle.id = f"v{i}"
        e.vehicle.timestamp = 1480168800 + i
        e.vehicle.position.latitude, e.vehicle.position.longitude = 30.3, -97.7
        e.vehicle.position.speed = speed
    body = msg.SerializePartialToString()
    batch = next(FeedReader(body, replace(OPTIONS, drop_zero=True)).batches(100))
    assert (batch.rows, batch.rejected, batch.dropped_zero, batch.clamped) == (4, 0, 1, 2)
    assert batch.values.tolist() == [0.0, 30.0, 7.5]
    no_time = gtfs_realtime_pb2.FeedMessage()
    no_time.entity.add().CopyFrom(msg.entity[3])
    no_time.entity[0].vehicle.ClearField("timestamp")  # nor a header time
    (error,) = _errors(FeedReader(no_time.SerializePartialToString(), OPTIONS))
    assert error == (1, "entity 1 (vehicle 'v3'): no timestamp (neither vehicle.timestamp "
                        "nor the header's)")  # fmt: skip


@pytest.mark.parametrize("body", [b"not a protobuf \xff\xff", b"\x0a\x05"])
def test_garbage_is_refused_with_a_message(body: bytes) -> None:
    with pytest.raises(FeedFormatError, match="not a GTFS-Realtime FeedMessage"):
        list(FeedReader(body, OPTIONS).batches(100))  # when read
    with pytest.raises(FeedFormatError, match="not a GTFS-Realtime FeedMessage"):
        FeedReader(body, OPTIONS, fast=False)  # at once


def test_every_rejection_is_counted_and_the_first_hundred_listed() -> None:
    msg = gtfs_realtime_pb2.FeedMessage()
    msg.header.timestamp = 1480168800
    for _ in range(150):
        msg.entity.add().vehicle.position.speed = 1.0  # no vehicle id
    batches = list(FeedReader(msg.SerializePartialToString(), OPTIONS).batches(1000))
    assert sum(b.rejected for b in batches) == 150
    assert [n for b in batches for n, _ in b.errors] == list(range(1, 101))
