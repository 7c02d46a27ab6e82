"""Timestamps and local-time slots, checked against zoneinfo by brute force."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from app.time.slots import (
    TimestampParser,
    format_local,
    get_zone,
    is_valid_timezone,
    localize_us,
    parse_timestamp,
    slot_end_bound_us,
    slot_start_us,
    utc_offsets_us,
)

US = 1_000_000
CHICAGO = ZoneInfo("America/Chicago")
KOLKATA = ZoneInfo("Asia/Kolkata")


def us(dt: datetime) -> int:
    return int((dt - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))


def utc(*args: int) -> int:
    return us(datetime(*args, tzinfo=UTC))


@pytest.mark.parametrize(
    ("text", "expected", "aware"),
    [
        ("2016-11-25T11:53:40-06:00", utc(2016, 11, 25, 17, 53, 40), True),
        ("2016-11-25T17:53:40Z", utc(2016, 11, 25, 17, 53, 40), True),
        ("2016-11-25T17:53:40+00:00", utc(2016, 11, 25, 17, 53, 40), True),
        ("2016-11-25 23:23:40+05:30", utc(2016, 11, 25, 17, 53, 40), True),
        ("2016-11-25T17:53:40.250Z", utc(2016, 11, 25, 17, 53, 40) + 250_000, True),
        ("20161125T175340Z", utc(2016, 11, 25, 17, 53, 40), True),
        ("1480096420", utc(2016, 11, 25, 17, 53, 40), True),
        ("1480096420.5", utc(2016, 11, 25, 17, 53, 40) + 500_000, True),
        ("1.48009642e9", utc(2016, 11, 25, 17, 53, 40), True),
        (" 1480096420 ", utc(2016, 11, 25, 17, 53, 40), True),
        ("-86400", utc(1969, 12, 31), True),
        # naive: wall-clock microseconds, localised later
        ("2016-11-25T11:53:40", utc(2016, 11, 25, 11, 53, 40), False),
        ("2016-11-25", utc(2016, 11, 25), False),
    ],
)
def test_parse_timestamp(text: str, expected: int, aware: bool) -> None:
    assert parse_timestamp(text) == (expected, aware)
    assert TimestampParser()(text) == (expected, aware)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "x",
        "2016-11-25T25:00:00",
        "2016-02-30",
        "2016-11-25T11:53:60Z",
        "nan",
        "inf",
        "1e",
        "--1",
        "1e999999999",
        "9" * 50,
    ],
)
def test_parse_timestamp_rejects(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - any ValueError
        parse_timestamp(text)
    with pytest.raises(ValueError):  # noqa: PT011
        TimestampParser()(text)


def test_cached_parser_matches_general_parser() -> None:
    rng = random.Random(3)
    parser = TimestampParser(max_entries=50)  # small: exercises the cache reset too
    shapes = ["{d}T{t}", "{d} {t}", "{d}T{t}Z", "{d}T{t}{o}", "{d}T{t}.5{o}", "{d}T{t}{o} "]
    for _ in range(3000):
        d = f"20{rng.randint(10, 30)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        sec = rng.choice(["00", "07", "59", "60", "6x"])
        t = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{sec}"
        o = rng.choice(["+05:30", "-06:00", "+00:00", "-0600"])
        text = rng.choice(shapes).format(d=d, t=t, o=o)
        try:
            expected = parse_timestamp(text)
        except ValueError:
            with pytest.raises(ValueError):  # noqa: PT011
                parser(text)
        else:
            assert parser(text) == expected, text


def test_zone_names() -> None:
    assert is_valid_timezone("Asia/Kolkata") and is_valid_timezone("UTC")
    for bad in ("Mars/Olympus", "../etc/passwd", "", "utc+5", "localtime"):
        assert not is_valid_timezone(bad)
        with pytest.raises(ValueError):  # noqa: PT011
            get_zone(bad)


def test_localize_naive_times_with_pep495_rules() -> None:
    walls = np.array(
        [
            utc(2016, 11, 25, 11, 53, 40),  # CST
            utc(2016, 7, 1, 12, 0, 0),  # CDT
            utc(2016, 11, 6, 1, 30, 0),  # repeated hour: first occurrence (CDT)
            utc(2016, 3, 13, 2, 30, 0),  # skipped hour: read with CST, lands at 03:30 CDT
        ]
    )
    got = localize_us(walls, CHICAGO)
    assert got.tolist() == [
        utc(2016, 11, 25, 17, 53, 40),
        utc(2016, 7, 1, 17, 0, 0),
        utc(2016, 11, 6, 6, 30, 0),
        utc(2016, 3, 13, 8, 30, 0),
    ]
    assert localize_us(np.array([utc(2016, 11, 25, 9, 15)]), KOLKATA).tolist() == [
        utc(2016, 11, 25, 3, 45)
    ]


def test_utc_offsets_across_a_transition() -> None:
    t = np.arange(utc(2016, 11, 6, 6, 0), utc(2016, 11, 6, 8, 0), 60 * US)
    want = [
        int(datetime.fromtimestamp(x / US, CHICAGO).utcoffset() / timedelta(microseconds=1))
        for x in t.tolist()
    ]
    assert utc_offsets_us(t, CHICAGO).tolist() == want


def test_kolkata_hour_slots_start_at_half_past_utc() -> None:
    t = np.array(
        [
            utc(2016, 11, 25, 3, 29, 59),  # 08:59:59 local
            utc(2016, 11, 25, 3, 30, 0),  # 09:00:00 local
            utc(2016, 11, 25, 4, 29, 59),  # 09:59:59 local
            utc(2016, 11, 25, 4, 30, 0),  # 10:00:00 local
        ]
    )
    slots = slot_start_us(t, KOLKATA, 60).tolist()
    assert slots == [
        utc(2016, 11, 25, 2, 30),
        utc(2016, 11, 25, 3, 30),
        utc(2016, 11, 25, 3, 30),
        utc(2016, 11, 25, 4, 30),
    ]
    assert format_local(slots[1], KOLKATA) == "2016-11-25T09:00:00+05:30"


def test_slots_when_clocks_go_back_and_forward() -> None:
    # 2016-11-06: 01:00-02:00 happens twice in Chicago -> two distinct hour slots
    t = np.array([utc(2016, 11, 6, 6, 30), utc(2016, 11, 6, 7, 30)])
    assert slot_start_us(t, CHICAGO, 60).tolist() == [utc(2016, 11, 6, 6), utc(2016, 11, 6, 7)]
    # a day slot starts at local midnight and lasts 25 hours that day
    day = slot_start_us(np.array([utc(2016, 11, 7, 5, 59)]), CHICAGO, 1440).tolist()
    assert day == [utc(2016, 11, 6, 5)]
    # 2016-03-13: 02:00-03:00 does not exist; a 2-hour slot starting at 02:00 starts at 03:00 CDT
    t = np.array([utc(2016, 3, 13, 8, 30)])
    assert slot_start_us(t, CHICAGO, 120).tolist() == [utc(2016, 3, 13, 8)]


def _boundaries_brute_force(
    tz: ZoneInfo, step_min: int, start: datetime, minutes: int
) -> list[int]:
    """Instants (minute resolution) where the local clock reads a multiple of the step
    since local midnight, or jumps forward over one."""

    def wall_minutes(t: datetime) -> int:
        local = t.astimezone(tz).replace(tzinfo=None)
        return int((local - datetime(1970, 1, 1)) / timedelta(minutes=1))

    out = []
    prev = wall_minutes(start - timedelta(minutes=1))
    for i in range(minutes):
        t = start + timedelta(minutes=i)
        w = wall_minutes(t)
        if w % step_min == 0 or w // step_min > prev // step_min:
            out.append(us(t))
        prev = w
    return out


@pytest.mark.parametrize(
    "zone", ["America/Chicago", "Asia/Kolkata", "Europe/London", "Australia/Lord_Howe", "UTC"]
)
@pytest.mark.parametrize("step", [15, 60, 120, 1440])
def test_slot_start_matches_brute_force_around_transitions(zone: str, step: int) -> None:
    tz = ZoneInfo(zone)
    for start in (
        datetime(2016, 3, 11, tzinfo=UTC),
        datetime(2016, 10, 1, tzinfo=UTC),
        datetime(2016, 11, 4, tzinfo=UTC),
        datetime(2016, 4, 1, 12, tzinfo=UTC),
    ):
        span = 4 * 1440
        bounds = np.array(
            _boundaries_brute_force(tz, step, start - timedelta(days=2), span + 2 * 1440)
        )
        t = np.arange(us(start), us(start) + span * 60 * US, 7 * 60 * US + 13 * US)
        expected = bounds[np.searchsorted(bounds, t, side="right") - 1]
        assert slot_start_us(t, tz, step).tolist() == expected.tolist()


def test_slot_minutes_must_divide_a_day() -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        slot_start_us(np.array([0]), ZoneInfo("UTC"), 7)


@pytest.mark.parametrize(
    "zone",
    ["UTC", "America/Chicago", "Europe/London", "Australia/Lord_Howe", "Antarctica/Casey",
     "Pacific/Apia", "America/St_Johns", "Asia/Kathmandu"],
)  # fmt: skip
def test_slot_end_bound_is_after_every_instant_of_the_slot(zone: str) -> None:
    """A grid's records are read back by time range: every instant lies in
    ``[slot start, slot_end_bound_us(slot start))`` (2009-2012: 30-minute and 3-hour
    changes, Samoa's skipped day), with no slack beyond the change of offset."""
    tz = ZoneInfo(zone)
    t0 = int(datetime(2009, 1, 1, tzinfo=UTC).timestamp()) * US
    hours = np.arange(t0, t0 + 4 * 366 * 24 * 3600 * US, 3600 * US)
    changes = hours[1:][np.diff(utc_offsets_us(hours, tz)) != 0]
    near = np.arange(-2 * 86_400 * US, 2 * 86_400 * US, 7 * 60 * US + 13 * US)
    ts = np.unique(np.concatenate([hours[::97], *(c + near for c in changes.tolist())]))
    for minutes in (15, 60, 120, 1440):
        starts = slot_start_us(ts, tz, minutes)
        ends = slot_end_bound_us(starts, tz, minutes)
        assert np.all(starts <= ts) and np.all(ts < ends)
        assert np.all(ends - starts <= (minutes + 180) * 60 * US)
