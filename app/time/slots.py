"""Timestamps and timeslots as integer microseconds since the Unix epoch (UTC).

Rows carry ISO 8601 timestamps (with or without an offset) or epoch seconds.
Naive timestamps are wall-clock times in the dataset's IANA time zone. Slots
start at local-time boundaries: with ``timeslot_minutes = 60`` in Asia/Kolkata
(UTC+05:30), 09:00–10:00 local is one slot, which starts at 03:30 UTC.

Local-time rules follow PEP 495 (``fold=0``): an ambiguous wall time (the
repeated hour when clocks go back) is its *first* occurrence; a wall time that
does not exist (the hour skipped when clocks go forward) is read with the offset
in force before the change, so it lands just after the gap.

Offsets are looked up once per distinct hour (an hour holding a transition is
resolved row by row), so whole batches convert with numpy.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import numpy as np

US = 1_000_000
HOUR_US = 3600 * US
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_NAIVE = datetime(1970, 1, 1)
ONE_US = timedelta(microseconds=1)

#: Supported instants: 1900-01-01 (inclusive) to 2300-01-01 (exclusive), UTC.
MIN_US = (datetime(1900, 1, 1, tzinfo=UTC) - EPOCH) // ONE_US
MAX_US = (datetime(2300, 1, 1, tzinfo=UTC) - EPOCH) // ONE_US

_NUMERIC = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    # "localtime" / "posixrules" are host files, not IANA zones
    return (frozenset(available_timezones()) | {"UTC"}) - {"localtime", "posixrules"}


def is_valid_timezone(name: str) -> bool:
    """True for an IANA zone name known to the tz database (``UTC`` included)."""
    return name in _zone_names()


@lru_cache(maxsize=256)
def get_zone(name: str) -> ZoneInfo:
    """The ``ZoneInfo`` for an IANA name; ``ValueError`` if unknown."""
    if not is_valid_timezone(name):
        raise ValueError(f"unknown time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:  # pragma: no cover - tzdata mismatch
        raise ValueError(f"unknown time zone {name!r}") from exc


def _is_utc(tz: ZoneInfo) -> bool:
    return tz.key in ("UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Zulu")


def datetime_to_us(dt: datetime) -> int:
    """An aware datetime as microseconds since the epoch (exact)."""
    if dt.tzinfo is None:
        raise ValueError("naive datetime")
    return (dt - EPOCH) // ONE_US


def us_to_datetime(us: int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime (exact)."""
    return EPOCH + timedelta(microseconds=int(us))


def format_local(us: int, tz: ZoneInfo) -> str:
    """ISO 8601 with the zone's local offset, e.g. ``2016-11-25T11:00:00-06:00``."""
    return us_to_datetime(us).astimezone(tz).isoformat()


def _epoch_seconds_to_us(s: str) -> int:
    if len(s) > 40:
        raise ValueError("epoch seconds too long")
    if s.isdigit():
        return int(s) * US
    try:
        d = Decimal(s)
        if d.adjusted() >= 13:  # far outside the supported range; keeps int() cheap
            raise ValueError("epoch seconds out of range")
        return int((d * US).to_integral_value())
    except ArithmeticError as exc:  # decimal signals
        raise ValueError(str(exc)) from None


def parse_timestamp(text: str) -> tuple[int, bool]:
    """Parse one timestamp to ``(microseconds, has_offset)``.

    ISO 8601 (``datetime.fromisoformat``: ``2016-11-25T11:53:40-06:00``,
    ``...Z``, ``2016-11-25 11:53:40``, a bare date) or epoch seconds (a plain
    number, possibly fractional; always UTC). For a naive ISO timestamp the
    microseconds are *wall-clock* time, to be localised with :func:`localize_us`.
    Raises ``ValueError`` if unparsable.
    """
    s = text.strip()
    if len(s) > 4 and s[4] == "-":  # the common ISO case, checked first for speed
        dt = datetime.fromisoformat(s)
    elif _NUMERIC.fullmatch(s):
        return _epoch_seconds_to_us(s), True
    else:
        dt = datetime.fromisoformat(s)
    if dt.tzinfo is None:
        return (dt - EPOCH_NAIVE) // ONE_US, False
    return (dt - EPOCH) // ONE_US, True


_SECONDS = {f"{i:02d}": i * US for i in range(60)}


class TimestampParser:
    """:func:`parse_timestamp` with a cache for the usual whole-second shapes.

    ``YYYY-MM-DD[T ]HH:MM:SS`` optionally followed by ``Z`` or ``±HH:MM``: the
    text with its seconds set to ``00`` is parsed once (by :func:`parse_timestamp`,
    which validates it) and cached; each row then only adds its seconds (``00``
    to ``59``). Anything else goes the general way, so the results are identical.
    """

    def __init__(self, max_entries: int = 65_536) -> None:
        self._cache: dict[str, tuple[int, bool]] = {}
        self._max = max_entries

    def __call__(self, text: str) -> tuple[int, bool]:
        n = len(text)
        if n == 25 or n == 19 or n == 20:
            sec = _SECONDS.get(text[17:19])
            if sec is not None and text[16] == ":":
                key = text[:17] + text[19:]
                hit = self._cache.get(key)
                if hit is None:
                    if len(self._cache) >= self._max:
                        self._cache.clear()
                    hit = self._cache[key] = parse_timestamp(text[:17] + "00" + text[19:])
                return hit[0] + sec, hit[1]
        return parse_timestamp(text)


def _wall_offset_us(wall_us: int, tz: ZoneInfo, fold: int) -> int:
    dt = (EPOCH_NAIVE + timedelta(microseconds=int(wall_us))).replace(tzinfo=tz, fold=fold)
    off = dt.utcoffset()
    assert off is not None
    return off // ONE_US


def _utc_offset_us(utc_us: int, tz: ZoneInfo) -> int:
    off = us_to_datetime(utc_us).astimezone(tz).utcoffset()
    assert off is not None
    return off // ONE_US


def utc_offsets_us(utc_us: np.ndarray, tz: ZoneInfo) -> np.ndarray:
    """The zone's UTC offset (µs) at each UTC instant (int64 array in, int64 out)."""
    utc_us = np.asarray(utc_us, dtype=np.int64)
    if utc_us.size == 0 or _is_utc(tz):
        return np.zeros(utc_us.shape, dtype=np.int64)
    hours, inverse = np.unique(np.floor_divide(utc_us, HOUR_US), return_inverse=True)
    offsets = np.empty(hours.size, dtype=np.int64)
    mixed = []
    for i, h in enumerate(hours.tolist()):
        start = _utc_offset_us(h * HOUR_US, tz)
        offsets[i] = start
        if _utc_offset_us(h * HOUR_US + HOUR_US - 1, tz) != start:
            mixed.append(i)
    out = offsets[inverse]
    for i in mixed:  # an hour with a transition: row by row
        for j in np.flatnonzero(inverse == i).tolist():
            out[j] = _utc_offset_us(int(utc_us[j]), tz)
    return out


def localize_us(wall_us: np.ndarray, tz: ZoneInfo) -> np.ndarray:
    """Naive wall-clock microseconds in ``tz`` to UTC microseconds (PEP 495, ``fold=0``)."""
    wall_us = np.asarray(wall_us, dtype=np.int64)
    if wall_us.size == 0 or _is_utc(tz):
        return wall_us.copy()
    hours, inverse = np.unique(np.floor_divide(wall_us, HOUR_US), return_inverse=True)
    offsets = np.empty(hours.size, dtype=np.int64)
    mixed = []
    for i, h in enumerate(hours.tolist()):
        start, end = h * HOUR_US, h * HOUR_US + HOUR_US - 1
        probes = {_wall_offset_us(w, tz, f) for w in (start, end) for f in (0, 1)}
        offsets[i] = _wall_offset_us(start, tz, 0)
        if len(probes) != 1:
            mixed.append(i)
    out = wall_us - offsets[inverse]
    for i in mixed:  # a gap or a repeated hour: row by row
        for j in np.flatnonzero(inverse == i).tolist():
            w = int(wall_us[j])
            out[j] = w - _wall_offset_us(w, tz, 0)
    return out


def slot_start_us(utc_us: np.ndarray, tz: ZoneInfo, minutes: int) -> np.ndarray:
    """Start (UTC µs) of the local-time slot of ``minutes`` holding each instant.

    A slot starts where local wall time is a multiple of ``minutes`` after local
    midnight. When that wall time is ambiguous, the latest of its instants not
    after the row is taken; when it falls in a gap, the slot starts at the gap's
    end. ``minutes`` must divide 1440.
    """
    if minutes <= 0 or 1440 % minutes:
        raise ValueError("timeslot minutes must divide 1440")
    step = minutes * 60 * US
    utc_us = np.asarray(utc_us, dtype=np.int64)
    if _is_utc(tz):
        return np.floor_divide(utc_us, step) * step
    local = utc_us + utc_offsets_us(utc_us, tz)
    walls, inverse = np.unique(np.floor_divide(local, step) * step, return_inverse=True)
    lo = np.empty(walls.size, dtype=np.int64)
    hi = np.empty(walls.size, dtype=np.int64)
    for i, w in enumerate(walls.tolist()):
        a = w - _wall_offset_us(w, tz, 0)
        b = w - _wall_offset_us(w, tz, 1)
        lo[i], hi[i] = min(a, b), max(a, b)
    lo_r, hi_r = lo[inverse], hi[inverse]
    return np.where(hi_r <= utc_us, hi_r, lo_r)


def slot_end_bound_us(starts_us: np.ndarray, tz: ZoneInfo, minutes: int) -> np.ndarray:
    """For slots starting at ``starts_us`` (from :func:`slot_start_us`), an instant after
    every instant of the slot: the latest instant of the local wall time ``minutes`` after
    the start's. Exact without daylight saving; up to the change's length later around one."""
    step = minutes * 60 * US
    starts_us = np.asarray(starts_us, dtype=np.int64)
    if starts_us.size == 0 or _is_utc(tz):
        return starts_us + step
    walls, inverse = np.unique(
        starts_us + utc_offsets_us(starts_us, tz) + step, return_inverse=True
    )
    ends = [
        max(w - _wall_offset_us(w, tz, 0), w - _wall_offset_us(w, tz, 1)) for w in walls.tolist()
    ]
    return np.array(ends, dtype=np.int64)[inverse]
