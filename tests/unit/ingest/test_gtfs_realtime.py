"""GTFS-Realtime feeds become the CSV upload's records (app/ingest/gtfs_realtime.py).

Feeds are built from CapMetrics rows (the shared folder's, when present; else a few made
here), one ``FeedMessage`` per 30 s as the agency publishes them; the records read from
them equal the records read from the same positions written as CSV."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from google.transit import gtfs_realtime_pb2

from app.ingest.csv_records import ParseOptions, RecordReader
from app.ingest.gtfs_realtime import FeedFormatError, entity_of_line, feed_to_csv

DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "capmetrics" / "2016-11-26.csv"
OPTIONS = ParseOptions(
    value_bound=30.0, h3_resolution=8, timeslot_minutes=60, timezone=ZoneInfo("America/Chicago")
)


def _rows(limit: int) -> list[dict[str, str]]:
    if DATA.is_file():
        with DATA.open() as f:
            return [r for _, r in zip(range(limit), csv.DictReader(f), strict=False)]
    rng = np.random.default_rng(0)  # the shared data is absent: positions made here
    return [
        {
            "vehicle_id": str(8900 + i % 40),
            "timestamp": f"2016-11-26T08:{i % 60:02d}:07-06:00",
            "latitude": str(30.2 + rng.uniform(0, 0.2)),
            "longitude": str(-97.8 + rng.uniform(0, 0.2)),
            "speed": str(rng.uniform(0, 20)),
        }
        for i in range(limit)
    ]


def _feeds(rows: list[dict[str, str]]) -> list[bytes]:
    """One FeedMessage per 30 s of the rows' times."""
    by_window: dict[int, gtfs_realtime_pb2.FeedMessage] = {}
    for i, r in enumerate(rows):
        ts = int(datetime.fromisoformat(r["timestamp"]).timestamp())
        msg = by_window.setdefault(ts // 30, gtfs_realtime_pb2.FeedMessage())
        msg.header.gtfs_realtime_version = "2.0"
        msg.header.timestamp = ts
        e = msg.entity.add()
        e.id = str(i)
        e.vehicle.vehicle.id = r["vehicle_id"]
        e.vehicle.timestamp = ts
        e.vehicle.position.latitude = float(r["latitude"])
        e.vehicle.position.longitude = float(r["longitude"])
        e.vehicle.position.speed = float(r["speed"])
    return [m.SerializeToString() for _, m in sorted(by_window.items())]


def _records(text: str) -> list[tuple[str, int, int, float]]:
    reader = RecordReader(iter([text.encode()]), OPTIONS)
    users: list[str] = []
    grids: list[tuple[int, int]] = []
    out = []
    for b in reader.batches(10_000):
        users += b.new_users
        grids += b.new_grids
        out += [
            (users[u], grids[g][0], grids[g][1], v)
            for u, g, v in zip(
                b.user_codes.tolist(), b.grid_codes.tolist(), b.values.tolist(), strict=True
            )
        ]
    return out


def _float32(x: str) -> float:
    return float(np.float32(float(x)))


def test_feeds_give_the_records_of_the_same_positions_as_csv() -> None:
    rows = _rows(3000)
    from_feeds = []
    for body in _feeds(rows):
        feed = feed_to_csv(body)
        assert feed.rejected == []
        from_feeds += _records(feed.text)
    # the same positions as CSV (coordinates and speeds are 32-bit floats in the protocol)
    out = io.StringIO()
    out.write("user_id,timestamp,lat,lon,value\n")
    for r in sorted(rows, key=lambda r: datetime.fromisoformat(r["timestamp"]).timestamp()):
        out.write(
            f"{r['vehicle_id']},{r['timestamp']},{_float32(r['latitude'])!r},"
            f"{_float32(r['longitude'])!r},{_float32(r['speed'])!r}\n"
        )
    assert sorted(from_feeds) == sorted(_records(out.getvalue()))
    assert len(from_feeds) == len(rows)


def test_unusable_entities_are_rejected_by_number_with_a_reason() -> None:
    msg = gtfs_realtime_pb2.FeedMessage()
    msg.header.gtfs_realtime_version = "2.0"
    msg.header.timestamp = 1480168800
    good = msg.entity.add()
    good.id = "a"
    good.vehicle.vehicle.id = "v1"
    good.vehicle.position.latitude, good.vehicle.position.longitude = 30.3, -97.7
    good.vehicle.position.speed = 5.0  # the header's timestamp
    msg.entity.add().id = "no vehicle"  # e.g. an alert
    e = msg.entity.add()
    e.vehicle.position.latitude, e.vehicle.position.speed = 30.3, 1.0  # no id
    e = msg.entity.add()
    e.vehicle.vehicle.id = "v2"  # no position
    e = msg.entity.add()
    e.vehicle.vehicle.id = "v3"
    e.vehicle.position.latitude = 30.3  # no speed
    feed = feed_to_csv(msg.SerializePartialToString())  # entities without ids: partial
    reasons = dict(feed.rejected)
    assert sorted(reasons) == [2, 3, 4, 5] and feed.entities == 5
    assert "vehicle" in reasons[2] and "id" in reasons[3]
    assert "position" in reasons[4] and "speed" in reasons[5]
    records = _records(feed.text)
    assert len(records) == 1 and records[0][0] == "v1"
    assert entity_of_line(2) == 1  # the header is line 1


def test_a_value_out_of_range_is_reported_by_entity() -> None:
    msg = gtfs_realtime_pb2.FeedMessage()
    for i, lat in enumerate((30.3, 95.0)):
        e = msg.entity.add()
        e.vehicle.vehicle.id = f"v{i}"
        e.vehicle.timestamp = 1480168800
        e.vehicle.position.latitude, e.vehicle.position.longitude = lat, -97.7
        e.vehicle.position.speed = 3.0
    feed = feed_to_csv(msg.SerializePartialToString())  # entities without ids: partial
    reader = RecordReader(iter([feed.text.encode()]), OPTIONS)
    errors = [err for b in reader.batches(100) for err in b.errors]
    assert [(entity_of_line(line), "latitude" in why) for line, why in errors] == [(2, True)]


@pytest.mark.parametrize("body", [b"not a protobuf \xff\xff", b"\x0a\x05"])
def test_garbage_is_refused_with_a_message(body: bytes) -> None:
    with pytest.raises(FeedFormatError, match="FeedMessage"):
        feed_to_csv(body)
