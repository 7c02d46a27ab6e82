"""Streaming CSV of raw records: bytes in, validated batches out (pure). Every row is kept,
dropped (``drop_zero``) or rejected with its line and a reason; a bad file as a whole raises
:class:`CsvFormatError`."""

from __future__ import annotations

import csv
import itertools
import math
import operator
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

import numpy as np

from app.ingest.batches import Batch, GridCoder
from app.ingest.csv_fast import KeptRows, fast_delimiter, scan_plain
from app.ingest.csv_text import MAX_LINE_CHARS, CsvFormatError, iter_lines, text_blocks
from app.ingest.h3_cells import cells
from app.time.slots import MAX_US, MIN_US, TimestampParser, localize_us

__all__ = ["MAX_LINE_CHARS", "Batch", "CsvFormatError", "iter_lines", "text_blocks"]  # re-exported

#: A header or row with more fields than this refuses the file.
MAX_COLUMNS = 1000
#: Lines a fast-path run may read: at first, and after doubling on each full run.
RUN_ROWS = 1024
MAX_RUN_ROWS = 1 << 16
#: A run shorter than this before an unusual line doubles the lines read the usual way
#: before the next try (mostly unusual text is then read almost only the usual way).
SHORT_RUN = 16
#: How many rejection reasons an upload reports (all are counted).
MAX_REPORTED_ERRORS = 100


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
    """Read a CSV stream batch by batch: the header is checked at once, :meth:`batches` yields
    :class:`Batch` objects of at most ``batch_rows`` kept rows. Plain lines go through
    :mod:`app.ingest.csv_fast` (not with ``fast=False``): the batches are the same."""

    def __init__(self, chunks: Iterable[bytes], options: ParseOptions, *, fast: bool = True):
        self.options = options
        self._delimiter = fast_delimiter(options.delimiter) if fast else -1
        self._blocks = text_blocks(chunks)
        self._text = ""  # the current block of whole lines, read up to _at
        self._at = 0
        self._data: np.ndarray | None = None  # its bytes, when ASCII (for the fast path)
        self._plain_lines = 0  # lines read by the fast path (csv counts the others)
        self._reader = csv.reader(self._lines(), delimiter=options.delimiter, strict=False)
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
        self._done = False
        self._parse_ts = TimestampParser()
        self._user_codes: dict[str, int] = {}
        self._grids = GridCoder(options.timezone, options.timeslot_minutes)
        self._slow_rows = 0  # rows to read the usual way before the fast path is tried again
        self._backoff = 1
        self._run_rows = RUN_ROWS

    def _lines(self) -> Iterator[str]:
        """The lines left, for ``csv`` (which reads a row's lines, never more). A block the
        fast path cannot read is handed over whole (its offset moves at its end)."""
        while True:
            if self._at >= len(self._text) and not self._next_block():
                return
            if self._data is None:
                lines = self._text[self._at :].split("\n")
                last = lines.pop()  # "" after a final newline, else the file's last line
                yield from map(operator.add, lines, itertools.repeat("\n"))
                if last:
                    yield last
                self._at = len(self._text)
                continue
            end = self._text.find("\n", self._at) + 1 or len(self._text)
            line = self._text[self._at : end]
            self._at = end
            yield line

    @property
    def _line_no(self) -> int:
        """Lines read so far."""
        return self._reader.line_num + self._plain_lines

    def _next_block(self) -> bool:
        text = next(self._blocks, None)
        if text is None:
            return False
        self._text, self._at = text, 0
        plain = self._delimiter >= 0 and text.isascii()
        self._data = np.frombuffer(text.encode("ascii"), np.uint8) if plain else None
        return True

    def _next_or_none(self) -> list[str] | None:
        try:
            return next(self._reader, None)
        except csv.Error as exc:
            raise CsvFormatError(f"malformed CSV after line {self._line_no}: {exc}") from None

    def batches(self, batch_rows: int, first_rows: int | None = None) -> Iterator[Batch]:
        """Batches of ``batch_rows`` kept rows (the first of ``first_rows``: its writer
        starts sooner)."""
        size = batch_rows if first_rows is None else first_rows
        while not self._done:
            batch = self._read_batch(size)
            size = batch_rows
            if batch.rows:
                yield batch

    def _read_batch(self, batch_rows: int) -> Batch:
        acc = KeptRows()
        while acc.kept < batch_rows:
            if self._at >= len(self._text) and not self._next_block():
                self._done = True
                break
            if self._data is not None and self._slow_rows <= 0:
                self._read_plain(acc, batch_rows)
            elif not self._read_rows(acc, batch_rows):
                self._done = True
                break
        acc.flush()
        opts = self.options
        ts = np.concatenate(acc.ts)
        naive = ~np.concatenate(acc.aware)
        if naive.any():
            ts[naive] = localize_us(ts[naive], opts.timezone)
        cell = cells(np.concatenate(acc.lat), np.concatenate(acc.lon), opts.h3_resolution)
        grid_codes, new_grids = self._grids.codes(cell, ts)
        return Batch(
            user_codes=np.concatenate(acc.users),
            grid_codes=grid_codes,
            ts_us=ts,
            values=np.concatenate(acc.values),
            new_users=acc.new_users,
            new_grids=new_grids,
            rows=acc.rows,
            rejected=acc.rejected,
            clamped=acc.clamped,
            dropped_zero=acc.dropped,
            errors=acc.errors,
        )

    def _read_plain(self, acc: KeptRows, batch_rows: int) -> None:
        """Read the run of plain lines at the current offset, at most ``_run_rows`` lines."""
        assert self._data is not None
        opts = self.options
        room = min(self._run_rows, batch_rows - acc.kept)
        run = scan_plain(
            self._data, self._at, room, room, self._delimiter, self.index, len(self.header),
            opts.value_bound, opts.drop_zero, opts.reject_out_of_range,
        )  # fmt: skip
        if run.lines == room:
            self._run_rows = min(2 * self._run_rows, MAX_RUN_ROWS)
        elif run.end < len(self._data):  # at an unusual line: read it the usual way, and
            # after a short run more of them (twice as many each time), then retry
            short = run.lines < SHORT_RUN
            self._slow_rows = self._backoff if short else 1
            self._backoff = min(2 * self._backoff, 4096) if short else 1
            self._run_rows = RUN_ROWS
        if not run.lines:
            return
        user_codes = self._user_codes
        codes = []
        for first, n in zip(run.user_first.tolist(), run.user_len.tolist(), strict=True):
            user = self._text[first : first + n]
            code = user_codes.get(user)
            if code is None:
                code = user_codes[user] = len(user_codes)
                acc.new_users.append(user)
            codes.append(code)
        acc.add_run(run, np.array(codes, dtype=np.int64)[run.user_index])
        self._at = run.end
        self._plain_lines += run.lines

    def _read_rows(self, acc: KeptRows, batch_rows: int) -> bool:
        """Read rows the usual way until the batch is full or, where the fast path may
        read the text, ``_slow_rows`` rows were read. False at the end of the file."""
        opts = self.options
        iu, it, ila, ilo, iv = self.index
        ncols = len(self.header)
        U = float(opts.value_bound)
        drop_zero = opts.drop_zero
        reject_oor = opts.reject_out_of_range
        isfinite = math.isfinite
        parse_ts = self._parse_ts
        reader = self._reader
        user_codes = self._user_codes
        new_users, errors = acc.new_users, acc.errors
        users, ts, aware, lats, lons, values = acc.slow
        plain_lines = self._plain_lines
        last = reader.line_num + plain_lines
        rows, kept, budget = acc.rows, acc.kept, self._slow_rows  # written back at the end

        def reject(line: int, reason: str) -> None:
            acc.rejected += 1
            if len(errors) < MAX_REPORTED_ERRORS:
                errors.append((line, reason))

        try:
            while budget > 0 or self._data is None:
                row = next(reader, None)
                if row is None:
                    return False
                budget -= 1
                line = last + 1
                last = reader.line_num + plain_lines
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
                    us, aware_ = parse_ts(text)
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
                    acc.dropped += 1
                    continue
                if value < 0.0 or value > U:
                    if reject_oor:
                        reject(line, f"value {value!r} outside [0, {U!r}]")
                        continue
                    value = 0.0 if value < 0.0 else U
                    acc.clamped += 1
                code = user_codes.get(user)
                if code is None:
                    code = user_codes[user] = len(user_codes)
                    new_users.append(user)
                users.append(code)
                ts.append(us)
                aware.append(aware_)
                lats.append(lat)
                lons.append(lon)
                values.append(value)
                kept += 1
                if kept >= batch_rows:
                    return True
        except csv.Error as exc:
            raise CsvFormatError(f"malformed CSV at line {last + 1}: {exc}") from None
        finally:
            acc.rows, acc.kept, self._slow_rows = rows, kept, budget
        return True
