"""Streaming CSV of raw records: bytes in, validated batches out (pure, no database).

A file is a header line and one record per row. Every data row is either kept,
dropped (``drop_zero``) or rejected with its line number and a reason; problems
with the file as a whole (no header, a missing column, not UTF-8, absurd line
length or column count, broken quoting) raise :class:`CsvFormatError`.
"""

from __future__ import annotations

import codecs
import csv
import itertools
import math
import operator
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

import h3.api.basic_int as h3i
import numpy as np

from app.ingest.batches import Batch, GridCoder
from app.ingest.timeslots import MAX_US, MIN_US, TimestampParser, localize_us

__all__ = [
    "MAX_COLUMNS",
    "MAX_LINE_CHARS",
    "MAX_REPORTED_ERRORS",
    "Batch",
    "ColumnMap",
    "CsvFormatError",
    "ParseOptions",
    "RecordReader",
    "iter_lines",
]

#: A physical line longer than this (characters) refuses the file.
MAX_LINE_CHARS = 1 << 20
#: A header or row with more fields than this refuses the file.
MAX_COLUMNS = 1000
#: How many rejection reasons an upload reports (all are counted).
MAX_REPORTED_ERRORS = 100


class CsvFormatError(ValueError):
    """The file as a whole cannot be read as the expected CSV."""


@dataclass(frozen=True)
class ColumnMap:
    """Header names of the five columns a record needs."""

    user: str = "user_id"
    time: str = "timestamp"
    lat: str = "lat"
    lon: str = "lon"
    value: str = "value"

    def names(self) -> tuple[str, str, str, str, str]:
        return (self.user, self.time, self.lat, self.lon, self.value)


@dataclass(frozen=True)
class ParseOptions:
    """How rows become records for one dataset."""

    value_bound: float
    h3_resolution: int
    timeslot_minutes: int
    timezone: ZoneInfo
    columns: ColumnMap = field(default_factory=ColumnMap)
    drop_zero: bool = False
    reject_out_of_range: bool = False
    delimiter: str = ","


def iter_lines(chunks: Iterable[bytes], max_line_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Decode UTF-8 byte chunks (a leading BOM is dropped) into ``\\n``-terminated lines.

    Holds at most one chunk and one partial line in memory; a line longer than
    ``max_line_chars`` or bytes that are not UTF-8 raise :class:`CsvFormatError`.
    Lines are handed out by C-level iterators, one per chunk.
    """
    return itertools.chain.from_iterable(_chunk_lines(chunks, max_line_chars))


def _chunk_lines(chunks: Iterable[bytes], max_line_chars: int) -> Iterator[Iterator[str]]:
    decoder = codecs.getincrementaldecoder("utf-8-sig")("strict")
    pending = ""
    offset = 0
    lineno = 0
    for chunk in itertools.chain(chunks, [None]):
        final = chunk is None
        try:
            text = decoder.decode(b"" if chunk is None else chunk, final=final)
        except UnicodeDecodeError as exc:
            raise CsvFormatError(
                f"the file is not valid UTF-8 (near byte {offset + exc.start}, after line {lineno})"
            ) from None
        offset += 0 if chunk is None else len(chunk)
        if not text:
            continue
        lines = (pending + text).split("\n") if pending else text.split("\n")
        pending = lines.pop()
        if len(pending) > max_line_chars:
            raise CsvFormatError(f"line {lineno + len(lines) + 1} is longer than {max_line_chars}")
        if lines:
            if max(map(len, lines)) > max_line_chars:
                n = next(i for i, line in enumerate(lines) if len(line) > max_line_chars)
                raise CsvFormatError(f"line {lineno + n + 1} is longer than {max_line_chars}")
            lineno += len(lines)
            yield map(operator.add, lines, itertools.repeat("\n"))
    if pending:
        yield iter((pending,))


def _resolve_header(header: list[str], columns: ColumnMap) -> tuple[int, ...]:
    if len(header) > MAX_COLUMNS:
        raise CsvFormatError(f"the header has {len(header)} columns (at most {MAX_COLUMNS})")
    names = [h.strip() for h in header]
    wanted = columns.names()
    if len(set(wanted)) != len(wanted):
        raise CsvFormatError("the user, time, lat, lon and value columns must be distinct")
    missing = [w for w in wanted if w not in names]
    if missing:
        shown = ", ".join(repr(n) for n in names[:20])
        raise CsvFormatError(
            f"the header lacks column(s) {', '.join(map(repr, missing))} (it has {shown}; "
            "check the delimiter and the *_col parameters)"
        )
    twice = [w for w in wanted if names.count(w) > 1]
    if twice:
        raise CsvFormatError(f"column(s) {', '.join(map(repr, twice))} appear more than once")
    return tuple(names.index(w) for w in wanted)


def _short(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "…")


class RecordReader:
    """Read a CSV stream batch by batch.

    ``RecordReader(chunks, options)`` reads and checks the header at once
    (raising :class:`CsvFormatError`); :meth:`batches` then yields
    :class:`Batch` objects of at most ``batch_rows`` kept rows.
    """

    def __init__(self, chunks: Iterable[bytes], options: ParseOptions) -> None:
        self.options = options
        self._reader = csv.reader(iter_lines(chunks), delimiter=options.delimiter, strict=False)
        try:
            header = next(self._reader, None)
        except csv.Error as exc:
            raise CsvFormatError(f"unreadable header: {exc}") from None
        while header is not None and not any(h.strip() for h in header):
            header = self._next_or_none()  # leading blank lines
        if header is None:
            raise CsvFormatError("the file is empty (a header line is required)")
        self.header = header
        self.index = _resolve_header(header, options.columns)
        self._last_line = self._reader.line_num
        self._done = False
        self._parse_ts = TimestampParser()
        self._user_codes: dict[str, int] = {}
        self._grids = GridCoder(options.timezone, options.timeslot_minutes)

    def _next_or_none(self) -> list[str] | None:
        try:
            return next(self._reader, None)
        except csv.Error as exc:
            line = self._reader.line_num
            raise CsvFormatError(f"malformed CSV after line {line}: {exc}") from None

    def batches(self, batch_rows: int) -> Iterator[Batch]:
        while not self._done:
            batch = self._read_batch(batch_rows)
            if batch.rows:
                yield batch

    def _read_batch(self, batch_rows: int) -> Batch:
        opts = self.options
        iu, it, ila, ilo, iv = self.index
        ncols = len(self.header)
        U = float(opts.value_bound)
        res = opts.h3_resolution
        drop_zero = opts.drop_zero
        reject_oor = opts.reject_out_of_range
        to_cell = h3i.latlng_to_cell
        isfinite = math.isfinite
        parse_ts = self._parse_ts
        reader = self._reader

        user_codes = self._user_codes
        new_users: list[str] = []
        users: list[int] = []
        ts: list[int] = []
        naive: list[int] = []
        cells: list[int] = []
        values: list[float] = []
        errors: list[tuple[int, str]] = []
        rows = rejected = clamped = dropped = 0
        last = self._last_line

        def reject(line: int, reason: str) -> None:
            nonlocal rejected
            rejected += 1
            if len(errors) < MAX_REPORTED_ERRORS:
                errors.append((line, reason))

        kept = 0
        try:
            for row in reader:
                line = last + 1
                last = reader.line_num
                if not row:
                    continue  # a blank line is not a record
                rows += 1
                if len(row) != ncols:
                    if len(row) > MAX_COLUMNS:
                        raise CsvFormatError(
                            f"line {line} has {len(row)} fields (at most {MAX_COLUMNS})"
                        )
                    if len(row) == 1 and not row[0].strip():
                        rows -= 1
                        continue  # whitespace-only line
                    reject(line, f"expected {ncols} fields, got {len(row)}")
                    continue
                user = row[iu].strip()
                if not user:
                    reject(line, "missing user id")
                    continue
                text = row[it]
                try:
                    us, aware = parse_ts(text)
                except (ValueError, OverflowError):
                    reject(line, f"unparsable timestamp {_short(text)}")
                    continue
                # naive times are wall clock: allow a day of slack, checked again after localising
                if not MIN_US + 86_400_000_000 <= us < MAX_US - 86_400_000_000:
                    reject(line, f"timestamp {_short(text)} outside 1900-01-02..2299-12-30")
                    continue
                text = row[ila]
                try:
                    lat = float(text)
                except ValueError:
                    reject(line, f"unparsable latitude {_short(text)}")
                    continue
                if not -90.0 <= lat <= 90.0:
                    reason = "non-finite latitude" if not isfinite(lat) else f"latitude {lat!r}"
                    reject(line, f"{reason} outside [-90, 90]")
                    continue
                text = row[ilo]
                try:
                    lon = float(text)
                except ValueError:
                    reject(line, f"unparsable longitude {_short(text)}")
                    continue
                if not -180.0 <= lon <= 180.0:
                    reason = "non-finite longitude" if not isfinite(lon) else f"longitude {lon!r}"
                    reject(line, f"{reason} outside [-180, 180]")
                    continue
                text = row[iv]
                try:
                    value = float(text)
                except ValueError:
                    reject(line, f"unparsable value {_short(text)}")
                    continue
                if not isfinite(value):
                    reject(line, f"non-finite value {_short(text)}")
                    continue
                if value == 0.0 and drop_zero:
                    dropped += 1
                    continue
                if value < 0.0 or value > U:
                    if reject_oor:
                        reject(line, f"value {value!r} outside [0, {U!r}]")
                        continue
                    value = 0.0 if value < 0.0 else U
                    clamped += 1
                if not aware:
                    naive.append(len(users))
                code = user_codes.get(user)
                if code is None:
                    code = user_codes[user] = len(user_codes)
                    new_users.append(user)
                users.append(code)
                ts.append(us)
                cells.append(to_cell(lat, lon, res))
                values.append(value)
                kept += 1
                if kept >= batch_rows:
                    break
            else:
                self._done = True
        except csv.Error as exc:
            raise CsvFormatError(f"malformed CSV at line {last + 1}: {exc}") from None
        self._last_line = last

        ts_arr = np.array(ts, dtype=np.int64)
        if naive:
            idx = np.array(naive, dtype=np.int64)
            ts_arr[idx] = localize_us(ts_arr[idx], opts.timezone)
        grid_codes, new_grids = self._grids.codes(cells, ts_arr)
        return Batch(
            user_codes=np.array(users, dtype=np.int64),
            grid_codes=grid_codes,
            ts_us=ts_arr,
            values=np.array(values, dtype=np.float64),
            new_users=new_users,
            new_grids=new_grids,
            rows=rows,
            rejected=rejected,
            clamped=clamped,
            dropped_zero=dropped,
            errors=errors,
        )
