"""The feed reader's fast path (app/ingest/gtfs_fast.py) reads what the bindings read.

Each feed is read twice, from its bytes by the compiled loop and from the parsed message
alone (``fast=False``, as before the loop existed): the batches must be equal to the bit.
The feeds are written byte by byte, to hold what a writer of the bindings would not:
fields given twice (merged), with another wire type (kept as unknown), unknown fields
and extensions, ids that are not UTF-8, absent parts, and values out of range.
"""

from __future__ import annotations

import itertools
import random
import struct
from dataclasses import replace
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from app.ingest.csv_records import ParseOptions
from app.ingest.gtfs_fast import scan_entities
from app.ingest.gtfs_realtime import FeedFormatError, FeedReader

OPTIONS = ParseOptions(
    value_bound=30.0, h3_resolution=8, timeslot_minutes=60, timezone=ZoneInfo("America/Chicago")
)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _len(field: int, body: bytes) -> bytes:
    return _key(field, 2) + _varint(len(body)) + body


def _f32(field: int, x: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", x)


def _noise(rng: random.Random) -> bytes:
    """An unknown field or extension, of any skippable wire type."""
    field = rng.choice([9, 15, 99, 1000, 1999, 9000, 536870911])
    wire = rng.choice([0, 1, 2, 5])
    value = {0: _varint(rng.randrange(1 << 64)), 1: bytes(8), 5: bytes(4)}
    return _len(field, b"xyz") if wire == 2 else _key(field, wire) + value[wire]


def _entity(rng: random.Random) -> bytes:
    pick = rng.random
    vid = rng.choice([f"v{rng.randrange(30)}".encode()] * 8 + [b"", b" v1 ", b"\xff\xfe", b"\t"])
    lat = rng.choice([rng.uniform(29, 31)] * 10 + [95.0, -90.0, float("nan"), float("inf")])
    lon = rng.choice([rng.uniform(-98, -97)] * 10 + [181.0, -180.0, float("-inf")])
    speed = rng.choice([rng.uniform(0, 40)] * 6 + [0.0, -0.0, -3.0, float("nan"), 30.0])
    ts = rng.choice([1480168800 + rng.randrange(86_400)] * 8 + [0, 10**10 + 1, (1 << 64) - 1])
    position = [_f32(1, lat), _f32(2, lon), _f32(5, speed), _f32(3, 90.0)]
    vehicle = [_len(8, _len(1, vid) + _len(2, b"label")), _key(5, 0) + _varint(ts)]
    if pick() < 0.08:  # latitude given as a varint: unknown to the bindings
        position[0] = _key(1, 0) + _varint(5)
    if pick() < 0.08:
        position.append(_f32(5, 1.5))  # the speed again: the last one counts
    for part in (position, vehicle):
        if pick() < 0.1:
            part.insert(rng.randrange(len(part) + 1), _noise(rng))
        if pick() < 0.1:
            part.pop(rng.randrange(len(part)))
        rng.shuffle(part)
    vehicle.append(_len(2, b"".join(position)))
    if pick() < 0.05:  # the vehicle id again, in a second descriptor (merged)
        vehicle.append(_len(8, _len(1, b"v99")))
    if pick() < 0.05:
        vehicle.append(_key(5, 0) + _varint(1480170000))
    rng.shuffle(vehicle)
    parts = [_len(1, b"e"), _len(4, b"".join(vehicle))]
    if pick() < 0.05:  # the vehicle split in two (merged by the bindings)
        half = len(vehicle) // 2
        parts = [_len(4, b"".join(vehicle[:half])), _len(4, b"".join(vehicle[half:]))]
    if pick() < 0.03:
        parts = [_len(1, b"an alert"), _len(5, b"")]
    if pick() < 0.05:
        parts.insert(rng.randrange(len(parts) + 1), _noise(rng))
    return b"".join(parts)


def _feed(rng: random.Random, n: int) -> bytes:
    header = _len(1, b"2.0") + (_key(3, 0) + _varint(1480168800) if rng.random() < 0.5 else b"")
    parts = [_len(1, header)] + [_len(2, _entity(rng)) for _ in range(n)]
    if rng.random() < 0.5:
        parts.insert(rng.randrange(len(parts)), _noise(rng))
    return b"".join(parts)


def _read(body: bytes, options: ParseOptions, batch: int, fast: bool) -> list:
    out = []
    try:
        for b in FeedReader(body, options, fast=fast).batches(batch):
            arrays = (b.user_codes, b.grid_codes, b.ts_us, b.values)
            out.append(
                ([a.dtype.str + a.tobytes().hex() for a in arrays], b.new_users, b.new_grids,
                 b.rows, b.rejected, b.clamped, b.dropped_zero, b.errors)
            )  # fmt: skip
    except FeedFormatError as exc:
        out.append(("refused", str(exc)))
    return out


# Seeds 0-3 cover drop_zero and reject; the others run with the slow tests.
@pytest.mark.parametrize(
    "seed", [s if s < 4 else pytest.param(s, marks=pytest.mark.slow) for s in range(10)]
)
def test_fast_and_message_paths_read_the_same_batches(seed: int) -> None:
    rng = random.Random(seed)
    options = replace(OPTIONS, drop_zero=seed % 3 == 1, reject_out_of_range=seed % 4 == 2)
    body = _feed(rng, 1500)
    short = _feed(rng, 120)  # batches of 1 and 7 cost a batch per few rows: fewer suffice
    for batch in (1, 7, 400, 5000):
        fast = _read(short if batch < 10 else body, options, batch, fast=True)
        assert fast == _read(short if batch < 10 else body, options, batch, fast=False), batch
        assert fast and fast[0][0] != "refused"


def _plain_feed(n: int, seed: int) -> bytes:
    """Usual entities only: a vehicle id, a time, a position and a speed each."""
    rng = random.Random(seed)
    entities = []
    for i in range(n):
        position = _f32(1, rng.uniform(29, 31)) + _f32(2, rng.uniform(-98, -97))
        vehicle = _len(8, _len(1, f"v{i % 50}".encode())) + _key(5, 0) + _varint(1480168800 + i)
        entities.append(_len(4, vehicle + _len(2, position + _f32(5, rng.uniform(0, 30)))))
    return _len(1, _len(1, b"2.0")) + b"".join(_len(2, e) for e in entities)


def test_plain_feeds_are_read_in_one_scan() -> None:
    body = _plain_feed(3000, 3)
    fields = scan_entities(np.frombuffer(body, np.uint8), 0, 5000)
    assert (fields.end, fields.count, len(fields.id_first)) == (len(body), 3000, 50)
    assert (fields.flags == 3).all()
    assert _read(body, OPTIONS, 1000, fast=True) == _read(body, OPTIONS, 1000, fast=False)


def test_a_group_stops_the_scan_and_the_rest_is_read_from_the_message() -> None:
    rng = random.Random(4)
    group = _key(20, 3) + _key(1, 0) + _varint(7) + _key(20, 4)  # an unknown group
    body = _feed(rng, 30) + _len(2, _len(4, group)) + _feed(rng, 30)[5:]
    fields = scan_entities(np.frombuffer(body, np.uint8), 0, 100)
    assert fields.end == -1
    assert _read(body, OPTIONS, 10, fast=True) == _read(body, OPTIONS, 10, fast=False)


def test_a_body_the_bindings_refuse_is_refused_after_its_batches() -> None:
    body = _plain_feed(30, 5) + _len(1, _key(3, 0) + b"\xff")  # a header: truncated varint
    reader = FeedReader(body, OPTIONS)
    batches = reader.batches(10)
    assert [b.rows for b in itertools.islice(batches, 3)] == [10, 10, 10]
    with pytest.raises(FeedFormatError, match="not a GTFS-Realtime FeedMessage"):
        next(batches)
    with pytest.raises(FeedFormatError):
        FeedReader(body, OPTIONS, fast=False)
