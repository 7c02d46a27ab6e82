"""The streaming CSV reader: line splitting, header checks, row validation (no database)."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import h3
import numpy as np
import pytest

from app.datasets.grid_store import summarise_grids
from app.ingest.csv_records import (
    MAX_COLUMNS,
    Batch,
    ColumnMap,
    CsvFormatError,
    ParseOptions,
    RecordReader,
    iter_lines,
)
from app.uploads.ingestor import first_occurrences

OPTS = ParseOptions(
    value_bound=65.0, h3_resolution=8, timeslot_minutes=60, timezone=ZoneInfo("UTC")
)
HEADER = "user_id,timestamp,lat,lon,value\n"


CSV_FIELD_LIMIT = 131_072  # Python's default


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def read_all(text: str | bytes, opts: ParseOptions = OPTS, batch: int = 1000, chunk: int = 7):
    data = text.encode() if isinstance(text, str) else text
    reader = RecordReader(chunked(data, chunk), opts)
    return list(reader.batches(batch))


def test_iter_lines_handles_bom_crlf_and_split_characters() -> None:
    data = "\ufeffa,b\r\nü€,2\n\nlast".encode()
    for size in (1, 2, 3, 5, 100):
        assert list(iter_lines(chunked(data, size))) == ["a,b\r\n", "ü€,2\n", "\n", "last"]


def test_iter_lines_refuses_bad_utf8_and_huge_lines() -> None:
    with pytest.raises(CsvFormatError, match="UTF-8"):
        list(iter_lines([b"a,b\n", b"\xff\xfe,1\n"]))
    with pytest.raises(CsvFormatError, match="UTF-8"):
        list(iter_lines([b"a,b\n\xc3"]))  # truncated multi-byte character at the end
    with pytest.raises(CsvFormatError, match="longer than"):
        list(iter_lines([b"x" * 1000] * 20, max_line_chars=5000))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("\n\n", "empty"),
        ("user_id,timestamp,lat,lon\n1,2,3,4\n", "lacks column.*'value'"),
        ("user_id;timestamp;lat;lon;value\n1;2;3;4;5\n", "lacks column"),
        ("user_id,timestamp,lat,lon,value,value\n", "more than once"),
        (",".join(f"c{i}" for i in range(MAX_COLUMNS + 1)) + "\n", "columns"),
        (HEADER + '1,"2016-01-01T00:00:00Z,0,0,1\n' + "x" * 200_000 + "\n", "malformed|longer"),
        (HEADER + "1,2016-01-01T00:00:00Z,0,0,1" + ",0" * MAX_COLUMNS + "\n", "fields"),
    ],
)
def test_unreadable_files_raise(text: str, match: str) -> None:
    # the csv module's field limit is process-wide, and importing frictionless (the Data
    # Package tests) raises it: the server runs with Python's default
    limit = csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        with pytest.raises(CsvFormatError, match=match):
            read_all(text)
    finally:
        csv.field_size_limit(limit)


def test_column_mapping_extra_columns_and_bom() -> None:
    opts = ParseOptions(
        value_bound=30.0,
        h3_resolution=8,
        timeslot_minutes=60,
        timezone=ZoneInfo("America/Chicago"),
        columns=ColumnMap("vehicle_id", "timestamp", "latitude", "longitude", "speed"),
    )
    text = (
        "\ufeffvehicle_id,timestamp,speed,route_id,latitude,longitude,trip_headsign\n"
        '8940,2016-11-25T11:53:40-06:00,7.15264,1,30.421946,-97.665924,"1-Metric, SB"\n'
    )
    (batch,) = read_all(text, opts)
    assert batch.new_users == ["8940"]
    cell = h3.str_to_int(h3.latlng_to_cell(30.421946, -97.665924, 8))
    slot = int(datetime(2016, 11, 25, 17, tzinfo=UTC).timestamp()) * 1_000_000
    assert batch.new_grids == [(cell, slot)]
    assert batch.values.tolist() == [7.15264]


def test_every_row_is_kept_dropped_or_rejected_with_its_line() -> None:
    text = (
        HEADER
        + "u1,2016-11-25T10:00:00Z,12.9,77.6,10\n"  # 2 ok
        + ",2016-11-25T10:00:00Z,12.9,77.6,10\n"  # 3 missing user
        + "u1,yesterday,12.9,77.6,10\n"  # 4 bad time
        + "u1,2016-11-25T10:00:01Z,91,77.6,10\n"  # 5 lat out of range
        + "u1,2016-11-25T10:00:02Z,12.9,-180.5,10\n"  # 6 lon out of range
        + "u1,2016-11-25T10:00:03Z,nan,77.6,10\n"  # 7 non-finite lat
        + "u1,2016-11-25T10:00:04Z,12.9,77.6,inf\n"  # 8 non-finite value
        + "u1,2016-11-25T10:00:05Z,12.9,77.6,fast\n"  # 9 unparsable value
        + "u1,2016-11-25T10:00:06Z,12.9\n"  # 10 short row
        + "\n"  # 11 blank: not a row
        + 'u2,2016-11-25T10:00:07Z,12.9,77.6,"7\n0"\n'  # 12-13 quoted newline: bad value
        + "u2,2016-11-25T10:00:08Z,12.9,77.6,70\n"  # 14 clamped to 65
        + "u2,2016-11-25T10:00:09Z,12.9,77.6,-1\n"  # 15 clamped to 0
        + "u2,2016-11-25T10:00:10Z,12.9,77.6,0\n"  # 16 zero kept
        + "u3,1480068000,12.9,77.6,1\n"  # 17 epoch seconds
        + "u3,1800-01-01T00:00:00Z,12.9,77.6,1\n"  # 18 out of supported range
    )
    (batch,) = read_all(text, batch=1000)
    assert batch.rows == 15
    assert [line for line, _ in batch.errors] == [3, 4, 5, 6, 7, 8, 9, 10, 12, 18]
    reasons = dict(batch.errors)
    assert reasons[3] == "missing user id"
    assert "timestamp" in reasons[4] and "latitude" in reasons[5] and "longitude" in reasons[6]
    assert "non-finite latitude" in reasons[7] and "non-finite value" in reasons[8]
    assert "unparsable value" in reasons[9] and "expected 5 fields" in reasons[10]
    assert batch.rejected == 10 and batch.clamped == 2 and len(batch) == 5
    assert batch.values.tolist() == [10.0, 65.0, 0.0, 0.0, 1.0]
    assert batch.new_users == ["u1", "u2", "u3"]
    assert batch.user_codes.tolist() == [0, 1, 1, 1, 2]
    assert batch.ts_us[-1] == 1480068000 * 1_000_000


def test_values_clamp_reject_and_drop_zero() -> None:
    rows = (
        HEADER
        + "a,2016-01-01T00:00:00Z,0,0,70\n"
        + "a,2016-01-01T00:00:01Z,0,0,0\n"
        + "a,2016-01-01T00:00:02Z,0,0,-3\n"
    )
    (b,) = read_all(rows)
    assert (b.clamped, b.rejected, b.dropped_zero, b.values.tolist()) == (2, 0, 0, [65.0, 0.0, 0.0])
    strict = ParseOptions(**{**OPTS.__dict__, "reject_out_of_range": True, "drop_zero": True})
    (b,) = read_all(rows, strict)
    assert (b.clamped, b.rejected, b.dropped_zero, len(b)) == (0, 2, 1, 0)
    assert [line for line, _ in b.errors] == [2, 4] and "outside [0, 65.0]" in b.errors[0][1]


def test_naive_times_are_local_and_codes_span_batches() -> None:
    opts = ParseOptions(**{**OPTS.__dict__, "timezone": ZoneInfo("Asia/Kolkata")})
    text = HEADER + "".join(
        f"u{i % 3},2016-11-25T09:{i:02d}:00,12.97,77.59,{i}\n" for i in range(10)
    )
    batches = read_all(text, opts, batch=4)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [b.new_users for b in batches] == [["u0", "u1", "u2"], [], []]
    assert batches[0].ts_us[0] == int(datetime(2016, 11, 25, 3, 30, tzinfo=UTC).timestamp()) * 10**6
    assert len(batches[0].new_grids) == 1 and batches[1].new_grids == []
    assert np.concatenate([b.grid_codes for b in batches]).tolist() == [0] * 10
    assert batches[0].new_grids[0][1] == batches[0].ts_us[0]  # 09:00 local = slot start


def test_a_smaller_first_batch() -> None:
    text = HEADER + "".join(f"u{i},2016-11-25T09:{i:02d}:00,12.97,77.59,1\n" for i in range(10))
    reader = RecordReader(chunked(text.encode(), 7), OPTS)
    assert [len(b) for b in reader.batches(4, first_rows=1)] == [1, 4, 4, 1]


def test_row_accounting_identity() -> None:
    batches: list[Batch] = read_all(HEADER + "a,x,0,0,1\n" * 5 + "a,2016-01-01,0,0,1\n", batch=2)
    assert sum(b.rows for b in batches) == 6
    assert sum(b.rejected for b in batches) + sum(len(b) for b in batches) == 6


def test_first_occurrences_keeps_the_first_of_each_user_time() -> None:
    users = np.array([2, 1, 2, 1, 2])
    ts = np.array([5, 5, 5, 6, 4])
    keep = first_occurrences(users, ts)
    assert keep.tolist() == [1, 3, 4, 0]  # (1,5) (1,6) (2,4) (2,5): row 2 repeats row 0
    in_order = first_occurrences(np.array([1, 1, 1, 2, 2, 3]), np.array([3, 3, 4, 1, 1, 0]))
    assert in_order.tolist() == [0, 2, 3, 5]


def test_summarise_grids() -> None:
    g = np.array([1, 1, 1, 2, 2, 5])
    u = np.array([3, 3, 4, 3, 7, 7])
    v = np.arange(6.0)
    out = list(summarise_grids(g, u, v))
    assert [(s.grid_id, s.n_users, s.n_records, s.max_user_records) for s in out] == [
        (1, 2, 3, 2),
        (2, 2, 2, 1),
        (5, 1, 1, 1),
    ]
    assert np.frombuffer(out[0].user_ids, "<i8").tolist() == [3, 4]
    assert np.frombuffer(out[0].counts, "<i8").tolist() == [2, 1]
    assert np.frombuffer(out[1].values, "<f8").tolist() == [3.0, 4.0]
    assert list(summarise_grids(g[:0], u[:0], v[:0])) == []
