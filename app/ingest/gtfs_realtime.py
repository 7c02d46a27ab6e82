"""GTFS-Realtime vehicle positions in: a ``FeedMessage`` becomes the upload path's CSV.

A feed is read with Google's ``gtfs-realtime-bindings`` and each entity becomes one CSV
line of ``user_id,timestamp,lat,lon,value`` — the vehicle's id, its timestamp (the
vehicle's, else the header's; POSIX seconds, written as UTC), its position and
``position.speed`` (m/s) — so a feed goes through exactly the checks, clamping, grids
and idempotency of a CSV upload (:class:`app.ingest.csv_records.RecordReader`): the same
positions as CSV give the same records. An entity that is not a usable vehicle position
(no vehicle id, no position, no speed, no timestamp) is rejected here with its reason and
left as a blank line, so that CSV line ``n`` is entity ``n - 1`` (the header is line 1)
and every rejection can be reported by entity number.

Coordinates and speeds are 32-bit floats in the protocol; each is written as the
shortest decimal of its exact value, so nothing is rounded twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from google.protobuf.message import DecodeError
from google.transit import gtfs_realtime_pb2

__all__ = ["CSV_HEADER", "FeedCsv", "FeedFormatError", "entity_of_line", "feed_to_csv"]

CSV_HEADER = "user_id,timestamp,lat,lon,value\n"
_QUOTE_IF = frozenset(',"\n\r')


class FeedFormatError(ValueError):
    """The body is not a GTFS-Realtime ``FeedMessage``."""


@dataclass(frozen=True)
class FeedCsv:
    """The feed as CSV text (header, then one line per entity, blank where rejected), the
    rejections as ``(entity number, reason)`` and the number of entities."""

    text: str
    rejected: list[tuple[int, str]]
    entities: int


def entity_of_line(line: int) -> int:
    """The entity number (1-based) of a CSV line number of :func:`feed_to_csv`'s text."""
    return line - 1


def _csv_field(text: str) -> str:
    if _QUOTE_IF.isdisjoint(text):
        return text
    return '"' + text.replace('"', '""') + '"'


def _utc(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _line(entity: gtfs_realtime_pb2.FeedEntity, header_ts: int) -> tuple[str | None, str]:
    """``(csv line, "")`` for a usable vehicle position, else ``(None, reason)``."""
    if not entity.HasField("vehicle"):
        return None, "not a vehicle position (the entity has no 'vehicle')"
    v = entity.vehicle
    vid = v.vehicle.id.strip() if v.HasField("vehicle") else ""
    if not vid:
        return None, "no vehicle id (vehicle.vehicle.id is empty)"
    if not v.HasField("position"):
        return None, "no position"
    p = v.position
    if not p.HasField("speed"):
        return None, "no speed (position.speed is missing)"
    seconds = v.timestamp if v.HasField("timestamp") else header_ts
    if not seconds:
        return None, "no timestamp (neither the vehicle's nor the header's)"
    try:
        when = _utc(int(seconds))
    except (OverflowError, OSError, ValueError):
        return None, f"timestamp {seconds} is out of range"
    return f"{_csv_field(vid)},{when},{p.latitude!r},{p.longitude!r},{p.speed!r}\n", ""


def feed_to_csv(body: bytes) -> FeedCsv:
    """Parse a serialized ``FeedMessage`` into CSV text (see the module docstring)."""
    message = gtfs_realtime_pb2.FeedMessage()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise FeedFormatError(
            f"the body is not a GTFS-Realtime FeedMessage ({exc}); send the feed's bytes "
            "as they are, with Content-Type: application/x-protobuf"
        ) from None
    header_ts = message.header.timestamp if message.header.HasField("timestamp") else 0
    lines = [CSV_HEADER]
    rejected: list[tuple[int, str]] = []
    for number, entity in enumerate(message.entity, start=1):
        line, reason = _line(entity, header_ts)
        if line is None:
            rejected.append((number, reason))
            lines.append("\n")
        else:
            lines.append(line)
    return FeedCsv("".join(lines), rejected, len(message.entity))
