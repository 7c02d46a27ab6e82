"""Typical-day profiles (docs/math.md §6.8): one time of day pooled over chosen local dates.

A profile names local dates (``from`` to ``to``, the chosen weekdays) and a local time of
day ``HH:MM``; with ``slots`` consecutive slots of ``m`` minutes, its time-of-day slot
``j`` holds, on every chosen date, the dataset's slots whose local wall start lies in
``[HH:MM + j·m, HH:MM + (j+1)·m)``. Slots start at local wall multiples of their length
(``app.time.slots``), so a day of 23 or 25 hours just has no slot, or two slots (the
repeated hour: both pooled), at that time of day; a date without data adds nothing.

Each date is read in the UTC range from its first slot's earliest instant to the end of
its last slot's latest instant, and a grid belongs to the profile only when its slot's
local date is that date and its local time of day is one of the profile's slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import numpy as np

from app.datasets.models import Dataset
from app.kit.errors import InvalidRequest
from app.releases.schemas import ProfileIn
from app.time.budget_windows import window_start
from app.time.slots import get_zone

WEEKDAYS = (1, 2, 3, 4, 5)
WEEKENDS = (6, 7)
_DAY_MINUTES = 1440


@dataclass(frozen=True)
class Profile:
    """A parsed profile: its dates, time of day and slots, in the dataset's time zone."""

    date_from: date
    date_to: date
    days: str | tuple[int, ...]  # as asked
    dates: tuple[date, ...]  # the chosen local dates, ascending
    minute: int  # the first slot's local time of day, minutes after midnight
    slots: int
    slot_minutes: int
    timezone: str
    budget_window: str

    @property
    def first_start(self) -> datetime:
        """The UTC start of the first slot on the first date."""
        return self.day_range(self.dates[0])[0]

    def day_range(self, day: date) -> tuple[datetime, datetime]:
        """UTC instants bounding every slot of the profile on ``day``: from the earliest
        instant of its first wall start to the latest of its wall end."""
        zone = get_zone(self.timezone)
        wall = datetime.combine(day, time(0)) + timedelta(minutes=self.minute)
        end = wall + timedelta(minutes=self.slots * self.slot_minutes)
        starts = [wall.replace(tzinfo=zone, fold=f).astimezone(UTC) for f in (0, 1)]
        ends = [end.replace(tzinfo=zone, fold=f).astimezone(UTC) for f in (0, 1)]
        return min(starts), max(ends)

    def slot_of(self, slot_start: datetime, day: date) -> int | None:
        """The profile slot (0 .. slots-1) of a grid whose slot starts at ``slot_start``
        (UTC) when it lies on the local ``day``, else None."""
        local = slot_start.astimezone(get_zone(self.timezone))
        if local.date() != day:
            return None
        offset = local.hour * 60 + local.minute - self.minute
        if offset < 0 or offset % self.slot_minutes:
            return None
        j = offset // self.slot_minutes
        return j if j < self.slots else None

    def time_of_day(self, j: int) -> str:
        """Slot ``j``'s local time of day, ``HH:MM``."""
        minute = self.minute + j * self.slot_minutes
        return f"{minute // 60:02d}:{minute % 60:02d}"

    def windows(self) -> tuple[date, ...]:
        """The budget windows of the chosen dates, ascending (one, all time, without)."""
        return tuple(sorted({window_start(self.budget_window, d) for d in self.dates}))

    def window_index(self) -> dict[date, int]:
        """Each chosen date's budget window, as an index into :meth:`windows`."""
        index = {w: i for i, w in enumerate(self.windows())}
        return {d: index[window_start(self.budget_window, d)] for d in self.dates}

    def as_json(self) -> dict[str, Any]:
        days = self.days if isinstance(self.days, str) else list(self.days)
        return {
            "from": self.date_from.isoformat(),
            "to": self.date_to.isoformat(),
            "days": days,
            "n_days": len(self.dates),
            "time_of_day": self.time_of_day(0),
        }


def chosen_dates(date_from: date, date_to: date, days: str | tuple[int, ...]) -> tuple[date, ...]:
    """The local dates from ``date_from`` to ``date_to`` (included) on the chosen weekdays."""
    weekdays = {"all": range(1, 8), "weekdays": WEEKDAYS, "weekends": WEEKENDS}
    wanted = set(weekdays[days] if isinstance(days, str) else days)
    n = (date_to - date_from).days + 1
    every = (date_from + timedelta(days=i) for i in range(n))
    return tuple(d for d in every if d.isoweekday() in wanted)


def parse_time_of_day(text: str, slot_minutes: int) -> int:
    """``HH:MM`` as minutes after local midnight, on a slot boundary (400 naming
    slot_start otherwise)."""
    try:
        parsed = time.fromisoformat(text.strip())
    except ValueError:
        parsed = None
    if parsed is None or len(text.strip()) != 5 or parsed.second or parsed.microsecond:
        raise InvalidRequest(
            f"slot_start {text[:40]!r}: with a profile, give a local time of day 'HH:MM', "
            "e.g. '08:00'"
        )
    minute = parsed.hour * 60 + parsed.minute
    if minute % slot_minutes:
        raise InvalidRequest(
            f"slot_start {text}: a profile's time of day must start a slot of "
            f"{slot_minutes} minutes (a multiple of it after midnight)"
        )
    return minute


def parse_profile(
    body: ProfileIn, slot_start: str, slots: int, slot_minutes: int, dataset: Dataset
) -> Profile:
    """The profile of a release body (the schema checked its dates and weekdays)."""
    if _DAY_MINUTES % slot_minutes:
        raise InvalidRequest(
            f"profile: slots of {slot_minutes} minutes do not divide the day, so a time of "
            "day is not the same slot every day; give slot_minutes dividing 1440"
        )
    minute = parse_time_of_day(slot_start, slot_minutes)
    if minute + slots * slot_minutes > _DAY_MINUTES:
        raise InvalidRequest(
            f"slots: {slots} slots of {slot_minutes} minutes from {slot_start} pass midnight; "
            "a profile's slots lie in one day: release fewer slots"
        )
    days = body.days if isinstance(body.days, str) else tuple(body.days)
    dates = chosen_dates(body.date_from, body.date_to, days)
    if not dates:
        raise InvalidRequest(
            f"profile.days {body.days!r} chooses no date from {body.date_from} to "
            f"{body.date_to}: widen the dates or choose other days"
        )
    return Profile(
        body.date_from, body.date_to, days, dates, minute, slots, slot_minutes,
        dataset.timezone, dataset.budget_window,
    )  # fmt: skip


def units(users: np.ndarray, window: int, bits: int) -> np.ndarray:
    """Privacy units of ``users`` seen in the budget window of index ``window``: the
    pair packed as ``window << bits | user`` (the ledger's budget subjects)."""
    return (np.int64(window) << np.int64(bits)) | np.asarray(users, dtype=np.int64)
