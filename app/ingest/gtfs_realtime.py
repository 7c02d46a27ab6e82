"""GTFS-Realtime vehicle positions in: a ``FeedMessage`` becomes batches of records.

Each entity is one record: ``vehicle.vehicle.id`` the user, ``vehicle.timestamp`` (else the
header's) the time, ``position`` the place and ``position.speed`` (m/s) the value, each float32
taken exactly. Checks and grids are the CSV reader's, so the same positions as CSV give the same
records; an unusable entity is rejected with its 1-based number, vehicle id and reason."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError
from google.transit import gtfs_realtime_pb2

from app.ingest.batches import Batch, GridCoder
from app.ingest.csv_records import MAX_REPORTED_ERRORS, ParseOptions
from app.ingest.gtfs_fast import HAS_SPEED, HAS_TS, ODD, EntityFields, scan_entities
from app.ingest.h3_cells import cells
from app.time.slots import MAX_US, MIN_US

__all__ = ["FeedFormatError", "FeedReader", "entity_label"]

US = 1_000_000
#: The CSV reader's time range (1900-01-02..2299-12-30, UTC µs); feed times are unsigned.
_LATEST_US = MAX_US - 86_400 * US
_LATEST_S = -(-_LATEST_US // US)  # the first second at or past it
assert MIN_US < 0


class FeedFormatError(ValueError):
    """The body is not a GTFS-Realtime ``FeedMessage``."""


def entity_label(number: int, vehicle: str) -> str:
    """How a rejection names its entity: ``entity 3 (vehicle '8919')``."""
    return f"entity {number}" + (f" (vehicle {vehicle!r})" if vehicle else "")


class FeedReader:
    """Read one serialized ``FeedMessage``: :meth:`batches` yields :class:`Batch` objects of at
    most ``batch_rows`` entities, read from the bytes (:mod:`app.ingest.gtfs_fast`) or, when
    needed and with ``fast=False``, from the bindings' :attr:`message`. :class:`FeedFormatError`
    when the body is not a ``FeedMessage`` (from the constructor or the end of :meth:`batches`).
    """

    def __init__(self, body: bytes, options: ParseOptions, *, fast: bool = True) -> None:
        if not body:  # an empty message parses, but a feed has at least its header
            raise FeedFormatError(
                "the body is empty: send one GTFS-Realtime FeedMessage (its header and "
                "vehicle positions) with Content-Type: application/x-protobuf"
            )
        self.options = options
        self._body = body
        self._message: gtfs_realtime_pb2.FeedMessage | None = None
        self._at = 0 if fast else -1  # where the fast path continues (-1: not used)
        self._user_codes: dict[str, int] = {}
        self._grids = GridCoder(options.timezone, options.timeslot_minutes)
        if not fast:
            self.message  # noqa: B018 - parsed now

    @property
    def message(self) -> gtfs_realtime_pb2.FeedMessage:
        """The body parsed by the bindings (:class:`FeedFormatError` if it is not a feed)."""
        if self._message is None:
            message = gtfs_realtime_pb2.FeedMessage()
            try:
                message.ParseFromString(self._body)
            except DecodeError as exc:
                raise FeedFormatError(
                    f"the body is not a GTFS-Realtime FeedMessage ({exc}); send the feed's "
                    "bytes as they are, with Content-Type: application/x-protobuf"
                ) from None
            self._message = message
        return self._message

    @property
    def header_ts(self) -> int | None:
        header = self.message.header
        return header.timestamp if header.HasField("timestamp") else None

    def __len__(self) -> int:
        return len(self.message.entity)

    def batches(self, batch_rows: int) -> Iterator[Batch]:
        start = 0
        while self._at >= 0:  # entities read from the bytes while the scan can
            fields = scan_entities(np.frombuffer(self._body, np.uint8), self._at, batch_rows)
            if fields.end < 0:
                self._at = -1  # this batch and the rest from the message
            elif fields.count:
                self._at = fields.end if fields.count == batch_rows else -2  # -2: all read
                yield self._read_fields(fields, start)
                start += fields.count
            else:
                self._at = -2
        entities = len(self.message.entity)  # and the body is a feed, as the bindings read it
        if self._at == -2 and entities != start:
            raise RuntimeError(f"read {start} entities of a feed of {entities}")
        for first in range(start if self._at == -1 else entities, entities, batch_rows):
            stop = min(first + batch_rows, entities)
            yield self._checked(stop - first, self._read_entities(range(first, stop)))

    def _read_fields(self, fields: EntityFields, start: int) -> Batch:
        """The batch of the entities scanned from ``start`` (0-based)."""
        stop = start + fields.count
        # the usual entity (a vehicle id, a speed and a time) from the fields' columns
        ids = []
        for a, n in zip(fields.id_first.tolist(), fields.id_len.tolist(), strict=True):
            try:
                ids.append(self._body[a : a + n].decode().strip())
            except UnicodeDecodeError:
                ids.append("")  # read from the message, as the bindings decode it
        has_id = np.array([bool(i) for i in ids] + [False])[fields.id_index]
        usual = has_id & ((fields.flags & (HAS_SPEED | HAS_TS | ODD)) == HAS_SPEED | HAS_TS)
        at = np.flatnonzero(usual)
        late = fields.ts[at] >= _LATEST_S
        errors = [
            (n, f"timestamp {t} outside 1900-01-02..2299-12-30")
            for n, t in zip(
                (at[late] + start + 1).tolist(), fields.ts[at[late]].tolist(), strict=True
            )
        ]
        at = at[~late]
        rows = _Rows(
            errors, at + start + 1, [ids[i] for i in fields.id_index[at].tolist()],
            fields.ts[at].astype(np.int64), fields.lat[at], fields.lon[at], fields.speed[at],
        )  # fmt: skip
        other = np.flatnonzero(~usual)
        if other.size:  # the others from the message, merged in entity order
            rows = rows.merge(self._read_entities((other + start).tolist()))
        return self._checked(stop - start, rows)

    def _read_entities(self, indices: Iterable[int]) -> _Rows:
        """Read the entities at ``indices`` (ascending) from the parsed message."""
        header_ts = self.header_ts
        errors: list[tuple[int, str]] = []
        numbers: list[int] = []
        vehicles: list[str] = []
        seconds: list[int] = []
        lats: list[float] = []
        lons: list[float] = []
        speeds: list[float] = []
        entities = self.message.entity
        # An absent sub-message reads as an empty one, so the usual entity is read with
        # no HasField call (a non-zero speed is a present one); the reason of a failed
        # check is then found by _unusable.
        for i in indices:
            number, entity = i + 1, entities[i]
            v = entity.vehicle
            vid = _vehicle_id(entity)
            if vid is None:
                errors.append((number, "vehicle id is not UTF-8 text (vehicle.vehicle.id)"))
                continue
            p = v.position
            ts = v.timestamp
            speed = p.speed
            if (
                not vid
                or (not speed and not p.HasField("speed"))
                or (not ts and not v.HasField("timestamp"))
            ):
                ts = header_ts if not v.HasField("timestamp") else ts
                if (reason := _unusable(entity, vid, ts)) is not None:
                    errors.append((number, reason))
                    continue
            if ts >= _LATEST_S:
                errors.append((number, f"timestamp {ts} outside 1900-01-02..2299-12-30"))
                continue
            numbers.append(number)
            vehicles.append(vid)
            seconds.append(ts)
            lats.append(p.latitude)
            lons.append(p.longitude)
            speeds.append(speed)
        floats = (np.array(x, dtype=np.float64) for x in (lats, lons, speeds))
        return _Rows(
            errors, np.array(numbers, dtype=np.int64), vehicles,
            np.array(seconds, dtype=np.int64), *floats,
        )  # fmt: skip

    def _checked(self, rows: int, read: _Rows) -> Batch:
        """The range checks of :class:`app.ingest.csv_records.RecordReader`, on arrays and
        in its order: latitude, longitude, a finite value, ``drop_zero``, the value range."""
        errors, numbers, vehicles = read.errors, read.numbers, read.vehicles
        lat, lon, value = read.lat, read.lon, read.speed
        opts = self.options
        U = float(opts.value_bound)
        ts = read.seconds * US
        bad_lat = ~(np.abs(lat) <= 90.0)  # NaN included
        bad_lon = ~bad_lat & ~(np.abs(lon) <= 180.0)
        bad_value = ~bad_lat & ~bad_lon & ~np.isfinite(value)
        ok = ~(bad_lat | bad_lon | bad_value)
        zero = ok & (value == 0.0) if opts.drop_zero else np.zeros(len(ok), dtype=bool)
        outside = ok & ~zero & ((value < 0.0) | (value > U))
        if opts.reject_out_of_range:
            rejected_oor, clamped = outside, 0
        else:
            rejected_oor, clamped = np.zeros(len(ok), dtype=bool), int(outside.sum())
            value = np.clip(value, 0.0, U)
        for i in np.flatnonzero(~ok | rejected_oor).tolist():
            if bad_lat[i]:
                reason = f"latitude {lat[i].item()!r} outside [-90, 90]"
            elif bad_lon[i]:
                reason = f"longitude {lon[i].item()!r} outside [-180, 180]"
            elif bad_value[i]:
                reason = f"non-finite speed {read.speed[i].item()!r}"
            else:
                reason = f"speed {read.speed[i].item()!r} outside [0, {U!r}]"
            errors.append((int(numbers[i]), reason))
        rejected = len(errors)
        errors = [
            (n, f"{entity_label(n, _vehicle_id(self.message.entity[n - 1]) or '')}: {r}")
            for n, r in sorted(errors)[:MAX_REPORTED_ERRORS]
        ]
        keep = np.flatnonzero(ok & ~zero & ~rejected_oor)
        n = len(keep)
        cell = cells(lat[keep], lon[keep], opts.h3_resolution)
        kept = [vehicles[i] for i in keep.tolist()]
        user_codes = self._user_codes
        new_users = [vid for vid in dict.fromkeys(kept) if vid not in user_codes]
        for vid in new_users:  # codes in order of first appearance
            user_codes[vid] = len(user_codes)
        users = np.fromiter(map(user_codes.__getitem__, kept), dtype=np.int64, count=n)
        ts_kept = ts[keep]
        grid_codes, new_grids = self._grids.codes(cell, ts_kept)
        return Batch(
            user_codes=users,
            grid_codes=grid_codes,
            ts_us=ts_kept,
            values=value[keep],
            new_users=new_users,
            new_grids=new_grids,
            rows=rows,
            rejected=rejected,
            clamped=clamped,
            dropped_zero=int(zero.sum()),
            errors=errors,
        )


@dataclass
class _Rows:
    """Entities read (1-based ``numbers``, ascending; fields as columns) and rejections."""

    errors: list[tuple[int, str]]
    numbers: np.ndarray
    vehicles: list[str]
    seconds: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    speed: np.ndarray

    def merge(self, other: _Rows) -> _Rows:
        """Both sets of rows, in entity order."""
        order = np.argsort(np.concatenate([self.numbers, other.numbers]), kind="stable")
        vehicles = self.vehicles + other.vehicles
        columns = (
            np.concatenate([a, b])[order]
            for a, b in ((self.numbers, other.numbers), (self.seconds, other.seconds),
                         (self.lat, other.lat), (self.lon, other.lon), (self.speed, other.speed))
        )  # fmt: skip
        numbers, seconds, lat, lon, speed = columns
        return _Rows(
            self.errors + other.errors, numbers, [vehicles[i] for i in order.tolist()],
            seconds, lat, lon, speed,
        )  # fmt: skip


def _unusable(entity: gtfs_realtime_pb2.FeedEntity, vid: str, ts: int | None) -> str | None:
    """Why an entity is not a usable vehicle position (checked in this order), or None."""
    if not entity.HasField("vehicle"):
        return "not a vehicle position (the entity has no 'vehicle')"
    if not vid:
        return "no vehicle id (vehicle.vehicle.id is empty)"
    if not entity.vehicle.HasField("position"):
        return "no position (vehicle.position is missing)"
    if not entity.vehicle.position.HasField("speed"):
        return "no speed (vehicle.position.speed is missing)"
    if ts is None:
        return "no timestamp (neither vehicle.timestamp nor the header's)"
    return None


def _vehicle_id(entity: gtfs_realtime_pb2.FeedEntity) -> str | None:
    """The entity's vehicle id, stripped; ``None`` when it is not UTF-8 text (protobuf
    strings are: the bindings hand back the bytes of one that is not)."""
    raw_id = entity.vehicle.vehicle.id
    return raw_id.strip() if isinstance(raw_id, str) else None
