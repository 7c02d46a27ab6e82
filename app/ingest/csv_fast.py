"""The CSV reader's fast path: runs of *plain* lines parsed by one compiled loop (numba); the
first other line goes back to :class:`app.ingest.csv_records.RecordReader`, so every rejection
keeps its exact reason and line. A plain line reads the same either way:

* it ends with ``\\n`` (or ``\\r\\n``), has the header's number of fields, no NUL or other
  ``\\r``, and a ``"`` only around a whole field of a column not read, with no other ``"`` or
  newline inside;
* its user id has no leading or trailing space or control character;
* its time is ``YYYY-MM-DD[T ]HH:MM:SS`` with nothing, ``Z`` or ``±HH:MM`` after it (a valid date
  and time), or 1 to 11 digits (epoch seconds), in range;
* its latitude, longitude and value are ``[+-]digits[.digits]`` of at most 2^53 as an integer, at
  most 22 decimals: the integer / 10^k is then exactly ``float()``'s double (Clinger's fast path),
  in range and not refused by ``out_of_range``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from app.time.slots import MAX_US, MIN_US

__all__ = ["KeptRows", "PlainRun", "fast_delimiter", "scan_plain"]

_DAY_US = 86_400_000_000
_LOW_US = MIN_US + _DAY_US  # the reader's bounds (a day of slack for wall times)
_HIGH_US = MAX_US - _DAY_US
_POW10 = np.array([float(10**k) for k in range(23)])  # each exact
_MAX_MANTISSA = 1 << 53
_STOP = -1  # a field that ends the run
_DASH, _COLON, _SPACE, _T, _Z = ord("-"), ord(":"), ord(" "), ord("T"), ord("Z")
_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
_NL, _CR, _QUOTE, _PLUS, _DOT = ord("\n"), ord("\r"), ord('"'), ord("+"), ord(".")


def fast_delimiter(delimiter: str) -> int:
    """The delimiter's byte for :func:`scan_plain`, or -1 when the fast path cannot split
    at it the way ``csv`` does (not one ASCII character, or one with a meaning there)."""
    if len(delimiter) != 1 or not delimiter.isascii() or delimiter in '"\r\n\0':
        return -1
    return ord(delimiter)


@dataclass
class PlainRun:
    """What :func:`scan_plain` read: ``end`` (offset after its last line), ``lines``, the kept
    rows' fields, ``dropped`` / ``clamped``; ``user_first`` / ``user_len`` locate each distinct
    user id in the text, ``user_index`` each row's."""

    end: int
    lines: int
    dropped: int
    clamped: int
    user_index: np.ndarray
    user_first: np.ndarray
    user_len: np.ndarray
    ts_us: np.ndarray
    aware: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    values: np.ndarray


@dataclass
class KeptRows:
    """A batch being read: its tallies and kept rows, the runs of :func:`scan_plain` and between
    them the rows read the usual way (``slow``)."""

    rows: int = 0
    kept: int = 0
    rejected: int = 0
    clamped: int = 0
    dropped: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    new_users: list[str] = field(default_factory=list)
    users: list[np.ndarray] = field(default_factory=list)
    ts: list[np.ndarray] = field(default_factory=list)
    aware: list[np.ndarray] = field(default_factory=list)
    lat: list[np.ndarray] = field(default_factory=list)
    lon: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    slow: tuple[list, ...] = field(default_factory=lambda: ([], [], [], [], [], []))

    def flush(self) -> None:
        """Move the rows gathered in ``slow`` to the arrays."""
        users, ts, aware, lat, lon, values = self.slow
        self.users.append(np.array(users, dtype=np.int64))
        self.ts.append(np.array(ts, dtype=np.int64))
        self.aware.append(np.array(aware, dtype=np.bool_))
        self.lat.append(np.array(lat, dtype=np.float64))
        self.lon.append(np.array(lon, dtype=np.float64))
        self.values.append(np.array(values, dtype=np.float64))
        self.slow = ([], [], [], [], [], [])

    def add_run(self, run: PlainRun, user_codes: np.ndarray) -> None:
        """Add a run's rows (after those gathered so far), their users as ``user_codes``."""
        self.flush()
        self.users.append(user_codes)
        self.ts.append(run.ts_us)
        self.aware.append(run.aware)
        self.lat.append(run.lat)
        self.lon.append(run.lon)
        self.values.append(run.values)
        self.kept += len(run.ts_us)
        self.rows += run.lines
        self.dropped += run.dropped
        self.clamped += run.clamped


def scan_plain(
    data: np.ndarray,
    start: int,
    max_lines: int,
    max_kept: int,
    delimiter: int,
    columns: tuple[int, ...],
    n_columns: int,
    value_bound: float,
    drop_zero: bool,
    reject_out_of_range: bool,
) -> PlainRun:
    """Read plain lines of ``data`` (ASCII bytes) from offset ``start``: at most
    ``max_lines`` lines and ``max_kept`` kept rows; stop before the first other line."""
    # no more lines than the newlines left and a last line: a block holds ~1000, not 2^16
    left = int(np.count_nonzero(data[start:] == 10)) + 1
    n = max(0, min(max_lines, max_kept, left))
    ts = np.empty(n, dtype=np.int64)
    aware = np.empty(n, dtype=np.bool_)
    lat, lon, val = (np.empty(n, dtype=np.float64) for _ in range(3))
    user_index = np.empty(n, dtype=np.int64)
    user_first = np.empty(n, dtype=np.int64)
    user_len = np.empty(n, dtype=np.int64)
    size = 16
    while size < 2 * n:
        size *= 2
    end, lines, kept, dropped, clamped, users = _scan(
        data, start, max_lines, max_kept, delimiter, np.array(columns, dtype=np.int64),
        n_columns, float(value_bound), drop_zero, reject_out_of_range, _POW10,
        ts, aware, lat, lon, val, user_index, user_first, user_len,
        np.full(size, -1, dtype=np.int64),
    )  # fmt: skip
    return PlainRun(
        end, lines, dropped, clamped, user_index[:kept], user_first[:users], user_len[:users],
        ts[:kept], aware[:kept], lat[:kept], lon[:kept], val[:kept],
    )  # fmt: skip


@njit(cache=True, nogil=True)
def intern_bytes(
    data: np.ndarray,
    a: int,
    length: int,
    table: np.ndarray,
    first: np.ndarray,
    lens: np.ndarray,
    count: int,
) -> tuple[int, int]:
    """The number of ``data[a:a+length]`` among the ``count`` distinct strings seen (FNV-1a
    hash, open addressing in ``table``), numbering it ``count`` if new; and the new count."""
    mask = table.size - 1
    h = np.uint64(14695981039346656037)
    for j in range(a, a + length):
        h = (h ^ np.uint64(data[j])) * np.uint64(1099511628211)
    slot = np.int64(h & np.uint64(mask))
    while True:
        u = table[slot]
        if u < 0:
            table[slot] = count
            first[count] = a
            lens[count] = length
            return count, count + 1
        if lens[u] == length:
            f = first[u]
            same = True
            for j in range(length):
                if data[f + j] != data[a + j]:
                    same = False
                    break
            if same:
                return u, count
        slot = (slot + 1) & mask


@njit(cache=True, nogil=True)
def _digits(data: np.ndarray, at: int, count: int) -> int:
    """The number written by ``count`` ASCII digits at ``at``, or -1."""
    out = 0
    for i in range(at, at + count):
        d = int(data[i]) - 48
        if d < 0 or d > 9:
            return -1
        out = out * 10 + d
    return out


@njit(cache=True, nogil=True)
def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm)."""
    if m <= 2:
        y -= 1
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@njit(cache=True, nogil=True)
def _time_us(data: np.ndarray, a: int, b: int) -> tuple[int, bool]:
    """``(µs, has offset)`` of a plain time field ``data[a:b]``; µs ``_STOP`` if not plain."""
    n = b - a
    if 1 <= n <= 11:  # epoch seconds
        s = _digits(data, a, n)
        return (_STOP, False) if s < 0 else (s * 1_000_000, True)
    if n != 19 and n != 20 and n != 25:
        return _STOP, False
    if data[a + 4] != _DASH or data[a + 7] != _DASH or data[a + 13] != _COLON:
        return _STOP, False
    if data[a + 16] != _COLON or (data[a + 10] != _T and data[a + 10] != _SPACE):
        return _STOP, False
    y, mo, d = _digits(data, a, 4), _digits(data, a + 5, 2), _digits(data, a + 8, 2)
    h, mi, s = _digits(data, a + 11, 2), _digits(data, a + 14, 2), _digits(data, a + 17, 2)
    if y < 1 or not 1 <= mo <= 12 or d < 1 or not 0 <= h <= 23 or not 0 <= mi <= 59:
        return _STOP, False
    if not 0 <= s <= 59:
        return _STOP, False
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    if d > (29 if mo == 2 and leap else _MONTH_DAYS[mo]):
        return _STOP, False
    us = ((_days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60 + s
    us *= 1_000_000
    if n == 19:
        return us, False
    if n == 20:
        return (us, True) if data[a + 19] == _Z else (_STOP, False)
    sign = data[a + 19]
    oh, om = _digits(data, a + 20, 2), _digits(data, a + 23, 2)
    if (sign != _PLUS and sign != _DASH) or data[a + 22] != _COLON:
        return _STOP, False
    if not 0 <= oh <= 23 or not 0 <= om <= 59:
        return _STOP, False
    offset = (oh * 60 + om) * 60_000_000
    return (us - offset if sign == _PLUS else us + offset), True


@njit(cache=True, nogil=True)
def _decimal(data: np.ndarray, a: int, b: int, pow10: np.ndarray) -> tuple[float, bool]:
    """``(value, plain)`` of a decimal field ``data[a:b]`` read exactly as ``float()``."""
    neg = False
    if a < b and (data[a] == _DASH or data[a] == _PLUS):
        neg = data[a] == _DASH
        a += 1
    mantissa = 0
    digits = 0
    frac = -1
    for i in range(a, b):
        if data[i] == _DOT and frac < 0:
            frac = 0
            continue
        d = int(data[i]) - 48
        if d < 0 or d > 9:
            return 0.0, False
        mantissa = mantissa * 10 + d
        digits += 1
        if frac >= 0:
            frac += 1
        if mantissa > _MAX_MANTISSA:
            return 0.0, False
    if digits == 0 or frac > 22:
        return 0.0, False
    x = float(mantissa)
    if frac > 0:
        x = x / pow10[frac]
    return (-x if neg else x), True


@njit(cache=True, nogil=True)
def _scan(
    data, start, max_lines, max_kept, delim, cols, ncols, U, drop_zero, reject_oor, pow10,
    ts_out, aware_out, lat_out, lon_out, val_out, user_index, user_first, user_len, table,
):  # fmt: skip
    """The loop of :func:`scan_plain`: ``(end, lines, kept, dropped, clamped, users)``."""
    iu, it, ila, ilo, iv = cols[0], cols[1], cols[2], cols[3], cols[4]
    bounds = np.empty(ncols + 1, dtype=np.int64)
    used = np.zeros(ncols, dtype=np.bool_)
    for col in cols:
        used[col] = True
    pos = start
    lines = kept = dropped = clamped = users = 0
    size = data.size
    while lines < max_lines and kept < max_kept:
        # split the line at the delimiter; stop at anything csv would read otherwise
        field = 0
        bounds[0] = pos
        i = pos
        line_end = -1
        while i < size:
            c = data[i]
            if c == delim:
                field += 1
                if field >= ncols:
                    break
                bounds[field] = i + 1
            elif c == _NL:
                line_end = i
                break
            elif c == _CR:
                if i + 1 < size and data[i + 1] == _NL:
                    line_end = i
                break
            elif c == _QUOTE:  # a quoted field, of a column not read, with no quote inside
                if i != bounds[field] or used[field]:
                    break
                i += 1
                while i < size and data[i] != _QUOTE and data[i] != _NL and data[i] != 0:
                    i += 1
                if i + 1 >= size or data[i] != _QUOTE:
                    break
                c = data[i + 1]
                if c != delim and c != _NL and c != _CR:
                    break
            elif c == 0:
                break
            i += 1
        if line_end < 0 or field != ncols - 1 or line_end == pos:
            break
        bounds[ncols] = line_end + 1
        nxt = line_end + 1 if data[line_end] == _NL else line_end + 2
        # the user id: left as it is by str.strip
        ua, ub = bounds[iu], bounds[iu + 1] - 1
        if ub <= ua or data[ua] <= _SPACE or data[ub - 1] <= _SPACE:
            break
        us, has_offset = _time_us(data, bounds[it], bounds[it + 1] - 1)
        if us == _STOP or not _LOW_US <= us < _HIGH_US:
            break
        la, ok = _decimal(data, bounds[ila], bounds[ila + 1] - 1, pow10)
        if not ok or not -90.0 <= la <= 90.0:
            break
        lo, ok = _decimal(data, bounds[ilo], bounds[ilo + 1] - 1, pow10)
        if not ok or not -180.0 <= lo <= 180.0:
            break
        v, ok = _decimal(data, bounds[iv], bounds[iv + 1] - 1, pow10)
        if not ok:
            break
        if v == 0.0 and drop_zero:
            dropped += 1
            lines += 1
            pos = nxt
            continue
        if v < 0.0 or v > U:
            if reject_oor:
                break
            v = 0.0 if v < 0.0 else U
            clamped += 1
        u, users = intern_bytes(data, ua, ub - ua, table, user_first, user_len, users)
        user_index[kept] = u
        ts_out[kept] = us
        aware_out[kept] = has_offset
        lat_out[kept] = la
        lon_out[kept] = lo
        val_out[kept] = v
        kept += 1
        lines += 1
        pos = nxt
    return pos, lines, kept, dropped, clamped, users
