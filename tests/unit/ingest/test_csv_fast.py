"""The CSV reader's fast path (app/ingest/csv_fast.py) reads what the usual path reads.

Each file is read twice, with the fast path and without it (``fast=False``: the row
checks alone, as before it existed), and the batches must be equal to the bit: codes,
times, values (signed zeros included), tallies, errors and their lines, refusals.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from app.ingest.csv_fast import scan_plain
from app.ingest.csv_records import ColumnMap, CsvFormatError, ParseOptions, RecordReader

OPTS = ParseOptions(
    value_bound=65.0, h3_resolution=8, timeslot_minutes=60, timezone=ZoneInfo("Asia/Kolkata")
)
USERS = ["u1", "8000", "8001", " u2", "u3 ", "", "ü", "a b", "\t", "x\x1f", "x\x7f", "\x1cz", "7"]
USERS += ['"v1"', '"v,2"', '""']
TIMES = [
    "2016-11-25T10:00:00Z", "2016-11-25T10:00:01-06:00", "2016-11-25 10:00:02+05:30",
    "2016-11-25T10:00:03", "2016-02-29T00:00:00Z", "2015-02-29T00:00:00Z",
    "2000-02-29T12:00:00", "1900-02-29T00:00:00Z", "2016-04-31T00:00:00Z",
    "2016-13-01T00:00:00Z", "2016-00-10T00:00:00Z", "2016-11-25T24:00:00Z",
    "2016-11-25T23:60:00Z", "2016-11-25T23:59:60Z", "2016-11-25T10:00:00+24:00",
    "2016-11-25T10:00:00+23:59", "2016-11-25T10:00:00-00:00", "2016-11-25T10:00:00+05:60",
    "1800-01-01T00:00:00Z", "1900-01-01T12:00:00Z", "1900-01-02T00:00:00Z",
    "2299-12-30T23:59:59Z", "2299-12-31T00:00:00Z", "0", "1480068000", "99999999999",
    "1480068000.5", "+1480068000", "-5", "2016-11-25t10:00:00Z", "2016-11-25T10:00:00+0600",
    "2016-11-25", "2016-11-25T10:00:00.5Z", " 2016-11-25T10:00:00Z", "2016-11-25T10:00:00Z ",
    "2016-11-25X10:00:00Z", "2016/11/25T10:00:00Z", "2016-11-25T10:00:00z", "", "now",
    "2016-11-2aT10:00:00Z", "0000-01-01T00:00:00Z", "2016-03-27T02:30:00", "148006800000000000",
    "12345678901", "１２３", '"2016-11-25T10:00:00Z"',
]  # fmt: skip
NUMBERS = [
    "12.9", "77.6", "-0", "-0.0", "+5", "5.", ".5", ".", "-", "", "1e5", "nan", "inf", " 1",
    "1 ", "1_0", "30.123456789012345678", "9007199254740993", "9007199254740992",
    "0.1234567890123456789012", "0.12345678901234567890123", "90", "90.0000001", "-90", "-180",
    "180.5", "179.9999999", "65", "65.0000001", "-1", "0", "0.0", "00012.5", "1.5.5", "+-1",
    "0.30000000000000004", "1.7976931348623157", "2.2250738585072014", "4503599627370497.5",
    "123456789012345.6", "0x10", "٣", "-.5", "+.25", '"5"', '"-1.5"',
]  # fmt: skip
EXTRAS = ["r1", "", '"7,0"', '"a\nb"', "x,y", "ü", '1"2', "\x00", '""', '"x"y', '"a""b"', '"a\rb"']
EXTRAS += [' "q"', '"q" ']


def _line(rng: random.Random, delimiter: str, odd: float, reverse: bool) -> str:
    """A row, or now and then (at a rate scaled by ``odd``) something unusual."""

    def pick(p: float) -> bool:
        return rng.random() < p * odd

    if pick(0.03):
        return rng.choice(["\n", "  \n", "\r\n", "a\n", delimiter * 6 + "\n"])
    user = rng.choice(USERS) if pick(0.2) else f"v{rng.randrange(40)}"
    if pick(0.3):
        ts = rng.choice(TIMES)
    else:
        t = datetime(2016, 11, 25, tzinfo=UTC) + timedelta(seconds=rng.randrange(3 * 86_400))
        ts = t.strftime("%Y-%m-%d{}%H:%M:%S".format(rng.choice("T "))) + rng.choice(
            ["Z", "", "-06:00", "+05:30"]
        )
    nums = [
        rng.choice(NUMBERS) if pick(0.15) else f"{rng.uniform(lo, hi):.{rng.randrange(8)}f}"
        for lo, hi in ((-89, 89), (-179, 179), (-10, 75))
    ]
    if rng.random() < 0.3:
        nums[2] = rng.choice(["0", "0.0", "-0", "0.00000"])
    fields = [user, ts, nums[0], nums[1], nums[2], rng.choice(EXTRAS) if pick(0.1) else "r"]
    if pick(0.02):
        fields.append("extra") if rng.random() < 0.5 else fields.pop()
    if reverse:
        fields.reverse()
    return delimiter.join(fields) + ("\r\n" if rng.random() < 0.05 else "\n")


def _read(data: bytes, opts: ParseOptions, chunk: int, batch: int, fast: bool):
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    out = []
    try:
        for b in RecordReader(chunks, opts, fast=fast).batches(batch):
            arrays = (b.user_codes, b.grid_codes, b.ts_us, b.values)
            out.append(
                ([a.dtype.str + a.tobytes().hex() for a in arrays], b.new_users, b.new_grids,
                 b.rows, b.rejected, b.clamped, b.dropped_zero, b.errors)
            )  # fmt: skip
    except CsvFormatError as exc:
        out.append(("refused", str(exc)))
    return out


# Seeds 0-3 and 5 cover every delimiter, drop_zero, reject, a BOM and no final newline;
# the others (more combinations) run with the slow tests.
@pytest.mark.parametrize(
    "seed",
    [s if s in (0, 1, 2, 3, 5) else pytest.param(s, marks=pytest.mark.slow) for s in range(12)],
)
def test_fast_and_usual_paths_read_the_same_batches(seed: int) -> None:
    rng = random.Random(seed)
    delimiter = [",", ";", "\t", "|", ","][seed % 5]
    opts = replace(
        OPTS,
        delimiter=delimiter,
        drop_zero=seed % 3 == 1,
        reject_out_of_range=seed % 4 == 2,
        timezone=ZoneInfo(["Asia/Kolkata", "UTC", "Europe/London", "America/Chicago"][seed % 4]),
        columns=ColumnMap("user_id", "timestamp", "lat", "lon", "value"),
    )
    header = delimiter.join(["user_id", "timestamp", "lat", "lon", "value", "route"]) + "\n"
    if seed % 2:  # the columns in another order
        header = delimiter.join(["route", "value", "lon", "lat", "timestamp", "user_id"]) + "\n"
    odd = [0.003, 0.03, 0.3, 1.0][seed % 4]  # from rare unusual lines to mostly unusual ones
    lines = [_line(rng, delimiter, odd, reverse=seed % 2 == 1) for _ in range(3000)]
    if seed % 6 == 5:
        lines[-1] = lines[-1].rstrip("\r\n")  # no newline at the end
    bom = "\ufeff" if seed % 4 == 3 else ""
    data = bom + header + "".join(lines)
    # 7-byte chunks cost a batch every 3 rows: 300 of the lines (both ends) suffice there
    short = bom + header + "".join(lines[:150] + lines[-150:])
    for chunk, batch in ((7, 3), (100, 50), (4096, 1000), (1 << 20, 100_000)):
        text = (short if chunk < 100 else data).encode()
        fast = _read(text, opts, chunk, batch, fast=True)
        assert fast == _read(text, opts, chunk, batch, fast=False), (chunk, batch)
        assert fast and fast[-1][0] != "refused"


def test_plain_runs_equal_the_usual_path_on_a_large_clean_file() -> None:
    rng = random.Random(5)
    day = datetime(2016, 11, 25)
    rows = [
        f"{8000 + rng.randrange(300)},"
        f"{day + timedelta(seconds=rng.randrange(86_400)):%Y-%m-%dT%H:%M:%S}-06:00,"
        f"{rng.uniform(0, 40):.5f},{rng.uniform(30.1, 30.5):.6f},{rng.uniform(-98, -97.5):.6f},"
        f"{rng.choice(['1-Metric, SB', '801-Tech Ridge', ''])!r}\n".replace("'", '"')
        for _ in range(20_000)
    ]
    header = "vehicle_id,timestamp,speed,latitude,longitude,trip_headsign\n"
    data = (header + "".join(rows)).encode()
    run = scan_plain(
        np.frombuffer(data[len(header) :], np.uint8), 0, 30_000, 30_000, ord(","),
        (0, 1, 3, 4, 2), 6, 30.0, False, False,
    )  # fmt: skip
    assert run.lines == 20_000  # quoted headsigns included
    opts = replace(
        OPTS, columns=ColumnMap("vehicle_id", "timestamp", "latitude", "longitude", "speed")
    )
    fast = _read(data, opts, 65_536, 5000, fast=True)
    assert fast == _read(data, opts, 65_536, 5000, fast=False)
    assert [b[3] for b in fast] == [5000] * 4


def test_refusals_are_the_same() -> None:
    good = b"u,2016-11-25T10:00:00Z,1,2,3\n" * 50
    for tail in (
        b'"u,2016-11-25T10:00:00Z,1,2,3\n' + b"x" * 2000,  # an open quote to the end
        b"u" + b",1" * 1200 + b"\n",  # too many fields
        b"u,2016-11-25T10:00:00Z,1,2,3\xff\n",  # not UTF-8
    ):
        data = b"user_id,timestamp,lat,lon,value\n" + good + tail
        fast = _read(data, OPTS, 64, 10, fast=True)
        assert fast == _read(data, OPTS, 64, 10, fast=False)
        assert fast[-1][0] == "refused" or tail.startswith(b'"')


def _plain_values(texts: list[str], template: str) -> tuple[list[int], object]:
    """The lines of ``texts`` (in ``template``) that the fast path reads, and its run of them."""
    data = np.frombuffer("".join(template.format(t) for t in texts).encode(), np.uint8)
    read, runs, at = [], [], 0
    for i in range(len(texts)):
        run = scan_plain(data, at, 1, 1, ord(","), (0, 1, 2, 3, 4), 5, 1e300, False, False)
        if run.lines:
            read.append(i)
            runs.append(run)
        at = int(np.flatnonzero(data[at:] == 10)[0]) + at + 1
    return read, runs


def test_decimals_are_read_as_float_does() -> None:
    rng = random.Random(1)
    texts = (
        [
            f"{rng.choice(['', '-', '+'])}{rng.randrange(10 ** rng.randrange(1, 9))}"
            f".{rng.randrange(10 ** rng.randrange(1, 9)):0{rng.randrange(0, 10)}d}"
            for _ in range(3000)
        ]
        + [  # up to 2^53 and 22 decimals, and past them (not read)
            f"{rng.randrange(10 ** rng.randrange(1, 18))}.{rng.randrange(10**15):0{width}d}"
            for width in (rng.randrange(24) for _ in range(1000))
        ]
        + ["0.1", "0.3", "1.0000000000000002", "9007199254740991.5", "-0.0", "5.", "-.5"]
    )
    read, runs = _plain_values(texts, "u,2016-11-25T10:00:00Z,0,0,{}\n")
    assert 3000 < len(read) < len(texts)
    got = np.array([r.values[0] for r in runs])
    want = [float(texts[i]) for i in read]
    assert got.tobytes() == np.array([0.0 if w < 0.0 else w for w in want]).tobytes()  # clamped


def test_times_are_read_as_fromisoformat_does() -> None:
    rng = random.Random(2)
    texts = []
    for _ in range(3000):
        t = datetime(1901, 1, 1) + timedelta(seconds=rng.randrange(397 * 365 * 86_400))
        sign, hh, mm = rng.choice("+-"), rng.randrange(24), rng.randrange(60)
        zone = rng.choice(["", "Z", f"{sign}{hh:02d}:{mm:02d}"])
        texts.append(t.strftime(f"%Y-%m-%d{rng.choice('T ')}%H:%M:%S") + zone)
    read, runs = _plain_values(texts, "u,{},0,0,1\n")
    assert len(read) == len(texts)
    for text, run in zip(texts, runs, strict=True):
        dt = datetime.fromisoformat(text)
        epoch = datetime(1970, 1, 1, tzinfo=UTC if dt.tzinfo else None)
        assert (run.ts_us[0], run.aware[0]) == (
            (dt - epoch) // timedelta(microseconds=1),
            dt.tzinfo is not None,
        )
