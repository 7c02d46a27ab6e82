"""A dataset's budget windows (docs/math.md §10.4): the window of the data's time a grid's
slot lies in, in the dataset's time zone.

``budget_window`` is ``none`` (one budget for all time, reset by an admin), ``day``,
``week`` (ISO weeks, Monday to Sunday) or ``month``. A window is named by its first
local date; a dataset without windows has the one window :data:`ALL_TIME`.

A slot starts where local wall time is a multiple of its length after local midnight
and its length divides 1440 minutes (``app.time.slots``), so every record of a
slot, and its start, have the same local date: the slot lies in one day, hence in one
week and one month. That holds for the dataset's own slots and for the coarser ones
made on demand (``slot_minutes`` also divides 1440), across DST changes too (a slot
whose wall start falls in a gap starts at the gap's end, the same local date).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Literal, Protocol

import numpy as np

from app.time.slots import (
    MAX_US,
    MIN_US,
    get_zone,
    localize_us,
    parse_timestamp,
    us_to_datetime,
)

BudgetWindow = Literal["none", "day", "week", "month"]

#: Local dates of the supported instants (``app.time.slots``), with a margin.
FIRST_DAY, LAST_DAY = date(1899, 12, 1), date(2300, 1, 1)

#: The one window of a dataset without budget windows (stored as ``0001-01-01``).
ALL_TIME = date.min


class Windowed(Protocol):
    """A dataset, or anything carrying its window settings (a query's grid context)."""

    @property
    def budget_window(self) -> str: ...
    @property
    def timezone(self) -> str: ...


def window_start(kind: str, day: date) -> date:
    """The first date of the ``kind`` window holding the local date ``day``."""
    if kind == "day":
        return day
    if kind == "week":  # ISO weeks start on Monday
        return day - timedelta(days=day.weekday())
    if kind == "month":
        return day.replace(day=1)
    if kind == "none":
        return ALL_TIME
    raise ValueError(f"unknown budget window {kind!r}")


def window_of(dataset: Windowed, slot_start: datetime) -> date:
    """The budget window of a grid whose slot starts at ``slot_start`` (aware, UTC):
    the window of the slot's local date in the dataset's time zone."""
    if dataset.budget_window == "none":
        return ALL_TIME
    local = slot_start.astimezone(get_zone(dataset.timezone)).date()
    return window_start(dataset.budget_window, local)


def privacy_unit(dataset: Windowed) -> str:
    """What one unit of protection is: ``user``, or ``user-day``/``-week``/``-month``."""
    return "user" if dataset.budget_window == "none" else f"user-{dataset.budget_window}"


def window_json(dataset: Windowed, window: date) -> str | None:
    """A window as the API shows it: its first local date, or null without windows."""
    return None if dataset.budget_window == "none" else window.isoformat()


def local_today(dataset: Windowed, now: datetime) -> date:
    """The local date of the instant ``now`` in the dataset's time zone."""
    return now.astimezone(get_zone(dataset.timezone)).date()


def parse_window(dataset: Windowed, text: str) -> date:
    """The window holding ``text``: a local date (``2016-11-25``) or an ISO 8601 instant
    (naive = local time). ``ValueError`` (with a message naming ``window``) if it is
    malformed or the dataset has no budget windows."""
    if dataset.budget_window == "none":
        raise ValueError(
            "window applies only to a dataset with a budget window; this one has "
            "budget_window 'none' (one budget for all time): drop window"
        )
    value = text.strip()
    try:
        if len(value) > 10 and value[4:5] == "-":  # an instant: its local date
            us, aware = parse_timestamp(value)
            if not aware:
                us = int(localize_us(np.array([us]), get_zone(dataset.timezone))[0])
            if not MIN_US <= us < MAX_US:
                raise ValueError("out of range")
            day = local_today(dataset, us_to_datetime(us))
        else:
            day = date.fromisoformat(value)
        if not FIRST_DAY <= day < LAST_DAY:
            raise ValueError("out of range")
    except (ValueError, OverflowError):
        raise ValueError(
            f"window {text[:40]!r} is not a date: give a local date in the window, "
            "e.g. window=2016-11-25"
        ) from None
    return window_start(dataset.budget_window, day)
