"""The window of a grid's slot (``app.time.budget_windows.window_of``): the local date of
the slot in the dataset's timezone, ISO weeks from Monday, calendar months; the edges
of local midnight, DST changes and month ends; the ``window`` parameter's reading."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from app.time.budget_windows import (
    ALL_TIME,
    parse_window,
    privacy_unit,
    window_of,
    window_start,
)
from app.time.slots import slot_start_us, us_to_datetime

CHICAGO = "America/Chicago"  # CST -06:00, CDT -05:00 (DST from 2024-03-10, to 2024-11-03)


@dataclass(frozen=True)
class DS:
    budget_window: str
    timezone: str = "UTC"


def local(text: str, zone: str) -> datetime:
    """An aware instant from a local wall time (the first of an ambiguous pair)."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)


def test_without_windows_every_slot_is_in_the_one_window() -> None:
    ds = DS("none", CHICAGO)
    for when in (datetime(1900, 1, 1, tzinfo=UTC), datetime(2299, 12, 31, 23, tzinfo=UTC)):
        assert window_of(ds, when) == ALL_TIME
    assert privacy_unit(ds) == "user"


def test_23h_local_and_0h_next_day_are_different_days_whatever_utc_says() -> None:
    ds = DS("day", CHICAGO)
    late = local("2016-11-25T23:00", CHICAGO)  # 2016-11-26 05:00 UTC
    next_day = local("2016-11-26T00:00", CHICAGO)
    assert late.date() == date(2016, 11, 26)  # UTC already says the 26th
    assert window_of(ds, late) == date(2016, 11, 25)
    assert window_of(ds, next_day) == date(2016, 11, 26)
    assert window_of(DS("day", "UTC"), late) == date(2016, 11, 26)
    # east of UTC: 00:30 local on the 26th is still the 25th in UTC
    kolkata = local("2016-11-26T00:30", "Asia/Kolkata")
    assert kolkata.date() == date(2016, 11, 25)
    assert window_of(DS("day", "Asia/Kolkata"), kolkata) == date(2016, 11, 26)
    assert privacy_unit(ds) == "user-day"


def test_every_slot_of_a_dst_day_is_in_that_day() -> None:
    """The 23-hour and the 25-hour local days: each hourly slot, as ingestion makes it
    from instants a minute apart, lies in its own local date; the repeated hour too."""
    zone = ZoneInfo(CHICAGO)
    ds = DS("day", CHICAGO)
    for day, hours in ((date(2024, 3, 10), 23), (date(2024, 11, 3), 25)):
        start = datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)
        end = (datetime.combine(day + timedelta(days=1), datetime.min.time(), zone)).astimezone(UTC)
        assert end - start == timedelta(hours=hours)
        minutes = np.arange(0, int((end - start).total_seconds()) // 60, 1, dtype=np.int64)
        instants = int(start.timestamp()) * 10**6 + minutes * 60 * 10**6
        for slot_minutes in (60, 120, 1440):
            slots = {int(s) for s in slot_start_us(instants, zone, slot_minutes)}
            windows = {window_of(ds, us_to_datetime(s)) for s in slots}
            assert windows == {day}, (day, slot_minutes, windows)
        # and the minute before local midnight / at it fall on either side
        assert window_of(ds, start - timedelta(minutes=1)) == day - timedelta(days=1)
        assert window_of(ds, end) == day + timedelta(days=1)


def test_a_slot_starting_in_a_midnight_gap_stays_in_its_day() -> None:
    """America/Havana skipped 00:00-01:00 on 2024-03-10: the day's first slot starts at
    01:00 local, the same date."""
    zone = ZoneInfo("America/Havana")
    first = local("2024-03-10T01:10", "America/Havana")
    (slot,) = slot_start_us(np.array([int(first.timestamp()) * 10**6]), zone, 1440)
    start = us_to_datetime(int(slot))
    assert start.astimezone(zone).hour == 1  # the gap: the day's slot starts at 01:00
    assert start.astimezone(zone).date() == date(2024, 3, 10)
    assert window_of(DS("day", "America/Havana"), start) == date(2024, 3, 10)


def test_weeks_start_on_monday() -> None:
    ds = DS("week", CHICAGO)
    monday = date(2016, 11, 21)
    for offset in range(7):
        when = local(f"{monday + timedelta(days=offset)}T12:00", CHICAGO)
        assert window_of(ds, when) == monday
    sunday_late = local("2016-11-27T23:59", CHICAGO)  # Monday 05:59 UTC
    assert window_of(ds, sunday_late) == monday
    assert window_of(ds, local("2016-11-28T00:00", CHICAGO)) == date(2016, 11, 28)
    # across a year end: 2020-12-31 (Thursday) is in the week of Monday 2020-12-28
    assert window_start("week", date(2021, 1, 3)) == date(2020, 12, 28)
    assert privacy_unit(ds) == "user-week"


@pytest.mark.parametrize(
    ("last", "first_next"),
    [
        (date(2016, 11, 30), date(2016, 12, 1)),
        (date(2016, 12, 31), date(2017, 1, 1)),
        (date(2024, 2, 29), date(2024, 3, 1)),  # leap year
        (date(2023, 2, 28), date(2023, 3, 1)),
    ],
)
def test_month_boundaries(last: date, first_next: date) -> None:
    ds = DS("month", CHICAGO)
    assert window_of(ds, local(f"{last}T23:00", CHICAGO)) == last.replace(day=1)
    assert window_of(ds, local(f"{first_next}T00:00", CHICAGO)) == first_next
    assert privacy_unit(ds) == "user-month"


def test_the_window_parameter_names_the_window_holding_a_local_date() -> None:
    ds = DS("week", CHICAGO)
    assert parse_window(ds, "2016-11-25") == date(2016, 11, 21)
    # an instant is read as its local date: 04:00 UTC on the 28th is the 27th in Chicago
    assert parse_window(ds, "2016-11-28T04:00:00Z") == date(2016, 11, 21)
    assert parse_window(ds, "2016-11-28T00:00:00") == date(2016, 11, 28)  # naive = local
    assert parse_window(DS("month"), " 2016-11-25 ") == date(2016, 11, 1)
    for bad in ("yesterday", "2016-13-01", "2016-11-25T25:00", "", "1480000000", "9999-12-31"):
        with pytest.raises(ValueError, match="window"):
            parse_window(ds, bad)
    with pytest.raises(ValueError, match="budget_window 'none'"):
        parse_window(DS("none"), "2016-11-25")
