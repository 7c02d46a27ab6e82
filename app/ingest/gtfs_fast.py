"""The feed reader's fast path: a ``FeedMessage``'s vehicle positions read from its bytes (the
protobuf wire format) by one compiled loop (numba).

An entity whose fields are not each given once with their declared wire type is flagged
:data:`ODD` and read from the bindings' message; a wire type that cannot be skipped stops the
scan. Whether the body is a ``FeedMessage`` is the bindings' to say."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from app.ingest.csv_fast import intern_bytes

__all__ = ["HAS_SPEED", "HAS_TS", "ODD", "EntityFields", "scan_entities"]

#: ``flags`` bits: the field is present (once); ``ODD``: read the entity from the message.
HAS_SPEED, HAS_TS, ODD = 1, 2, 4
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_FAIL = -1


@dataclass
class EntityFields:
    """What :func:`scan_entities` read of ``count`` entities: ``flags``, ``ts``, ``lat``, ``lon``,
    ``speed``, and ``id_index`` (-1: absent) into the distinct ids ``id_first``/``id_len``;
    ``end`` is where to continue, -1 when the scan stopped."""

    end: int
    count: int
    flags: np.ndarray
    ts: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    speed: np.ndarray
    id_index: np.ndarray
    id_first: np.ndarray
    id_len: np.ndarray


def scan_entities(body: np.ndarray, start: int, count: int) -> EntityFields:
    """Read the next ``count`` entities of the ``FeedMessage`` ``body`` (bytes) from offset
    ``start`` (0, then the previous call's ``end``), or as many as there are."""
    flags = np.zeros(count, dtype=np.uint8)
    ts = np.zeros(count, dtype=np.uint64)
    bits = [np.zeros(count, dtype=np.uint32) for _ in range(3)]  # latitude, longitude, speed
    id_index = np.full(count, -1, dtype=np.int64)
    id_first = np.empty(count, dtype=np.int64)
    id_len = np.empty(count, dtype=np.int64)
    size = 16
    while size < 2 * count:
        size *= 2
    table = np.full(size, -1, dtype=np.int64)
    lat, lon, speed = bits
    end, n, ids = _scan(
        body, start, count, flags, ts, lat, lon, speed, id_index, id_first, id_len, table
    )
    lat_, lon_, speed_ = (b[:n].view(np.float32).astype(np.float64) for b in bits)
    return EntityFields(
        end, n, flags[:n], ts[:n], lat_, lon_, speed_, id_index[:n], id_first[:ids], id_len[:ids]
    )


@njit(cache=True, nogil=True)
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[np.uint64, int]:
    """``(value, next offset)``, offset -1 when malformed."""
    out = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(10):
        if pos >= end:
            return out, _FAIL
        b = buf[pos]
        pos += 1
        out |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += np.uint64(7)
    return out, _FAIL


@njit(cache=True, nogil=True)
def _skip(buf: np.ndarray, pos: int, end: int, wire: int) -> int:
    """The offset after a field's value of wire type ``wire``, or -1."""
    if wire == _VARINT:
        return _varint(buf, pos, end)[1]
    if wire == _I64:
        return pos + 8 if pos + 8 <= end else _FAIL
    if wire == _I32:
        return pos + 4 if pos + 4 <= end else _FAIL
    if wire == _LEN:
        n, pos = _varint(buf, pos, end)
        if pos < 0 or n > np.uint64(end - pos):
            return _FAIL
        return pos + int(n)
    return _FAIL  # groups (deprecated) and invalid wire types


@njit(cache=True, nogil=True)
def _tag(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int]:
    """``(field number, wire type, offset of the value)``; offset -1 when malformed."""
    key, pos = _varint(buf, pos, end)
    if pos < 0 or key > np.uint64(0xFFFFFFFF) or (key >> np.uint64(3)) == 0:
        return 0, 0, _FAIL
    return int(key >> np.uint64(3)), int(key & np.uint64(7)), pos


@njit(cache=True, nogil=True)
def _u32(buf: np.ndarray, pos: int) -> np.uint32:
    """The little-endian fixed32 at ``pos`` (a float's bits)."""
    out = np.uint32(0)
    for i in range(3, -1, -1):
        out = (out << np.uint32(8)) | np.uint32(buf[pos + i])
    return out


@njit(cache=True, nogil=True)
def _entity(buf, a, b, k, flags, ts, lat, lon, speed, id_at, ends):
    """Read entity ``k`` from ``buf[a:b]`` (its id's offset and length into ``id_at``); False when
    the bytes cannot be walked."""
    seen = 0  # a bit per field read, to flag one given twice
    id_at[0] = -1
    ends[0] = b
    level = 0
    pos = a
    while True:
        if pos == ends[level]:
            if level == 0:
                return True
            level = 0 if level == 1 else 1
            continue
        field, wire, pos = _tag(buf, pos, ends[level])
        if pos < 0:
            return False
        known = -1  # a field read here: the wire type it is declared with, and its bit
        bit = 0
        if level == 0 and field == 4:
            known, bit = _LEN, 1
        elif level == 1 and (field == 8 or field == 2):
            known, bit = _LEN, (2 if field == 8 else 4)
        elif level == 1 and field == 5:
            known, bit = _VARINT, 8
        elif level == 2 and field == 1:
            known, bit = _LEN, 16
        elif level == 3 and (field == 1 or field == 2 or field == 5):
            known, bit = _I32, (32 if field == 1 else 64 if field == 2 else 128)
        if known < 0 or wire != known:
            if known >= 0:
                flags[k] |= ODD  # the bindings would keep it as an unknown field
            pos = _skip(buf, pos, ends[level], wire)
            if pos < 0:
                return False
            continue
        if seen & bit:
            flags[k] |= ODD  # given twice: the bindings merge or overwrite
        seen |= bit
        if wire == _VARINT:
            value, pos = _varint(buf, pos, ends[level])
            if pos < 0:
                return False
            ts[k] = value
            flags[k] |= HAS_TS
        elif wire == _I32:
            if pos + 4 > ends[level]:
                return False
            x = _u32(buf, pos)
            if field == 1:
                lat[k] = x
            elif field == 2:
                lon[k] = x
            else:
                speed[k] = x
                flags[k] |= HAS_SPEED
            pos += 4
        else:
            n, pos = _varint(buf, pos, ends[level])
            if pos < 0 or n > np.uint64(ends[level] - pos):
                return False
            if level == 2:  # the vehicle id
                id_at[0] = pos
                id_at[1] = int(n)
                pos += int(n)
                continue
            level = 1 if field == 4 else (2 if field == 8 else 3)
            ends[level] = pos + int(n)


@njit(cache=True, nogil=True)
def _scan(buf, pos, count, flags, ts, lat, lon, speed, id_index, id_first, id_len, table):
    """The loop of :func:`scan_entities`: ``(end, entities read, distinct ids)``."""
    end = buf.size
    id_at = np.empty(2, dtype=np.int64)
    ends = np.empty(4, dtype=np.int64)
    n = ids = 0
    while n < count and pos < end:
        field, wire, pos = _tag(buf, pos, end)
        if pos < 0:
            return _FAIL, n, ids
        if field != 2 or wire != _LEN:
            pos = _skip(buf, pos, end, wire)
            if pos < 0:
                return _FAIL, n, ids
            continue
        size, pos = _varint(buf, pos, end)
        if pos < 0 or size > np.uint64(end - pos):
            return _FAIL, n, ids
        if not _entity(buf, pos, pos + int(size), n, flags, ts, lat, lon, speed, id_at, ends):
            return _FAIL, n, ids
        pos += int(size)
        a, length = id_at[0], id_at[1]
        if a >= 0:
            u, ids = intern_bytes(buf, a, length, table, id_first, id_len, ids)
            id_index[n] = u
        n += 1
    return pos, n, ids
