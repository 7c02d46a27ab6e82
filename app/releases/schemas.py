from __future__ import annotations

from datetime import date
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.answers.epsilon import MIN_EPSILON
from app.answers.schemas import StatisticAnswer
from app.core import canonical_mechanism
from app.kit.json_numbers import JsonBody

Statistic = Literal["mean", "variance", "user_mean"]


def _both_statistics() -> list[Statistic]:
    return ["mean", "variance"]


#: The longest profile: a year of dates (a leap year's 366).
MAX_PROFILE_DAYS = 366
DayChoice = Literal["all", "weekdays", "weekends"]


class ProfileIn(JsonBody):
    """A typical day: the same time-of-day slots pooled over chosen local dates."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    date_from: date = Field(alias="from", description="First local date (YYYY-MM-DD).")
    date_to: date = Field(alias="to", description="Last local date, included.")
    days: DayChoice | list[int] = Field(
        default="all",
        description="Which dates between from and to: 'all', 'weekdays' (Monday to Friday), "
        "'weekends', or a list of ISO weekdays (1 = Monday … 7 = Sunday).",
    )

    @field_validator("date_from", "date_to", mode="before")
    @classmethod
    def _iso_date(cls, value: object) -> date:
        try:
            if isinstance(value, str) and len(value) == 10:
                return date.fromisoformat(value)
        except ValueError:
            pass
        raise ValueError(f"give a local date YYYY-MM-DD (sent {str(value)[:40]!r})")

    @field_validator("days")
    @classmethod
    def _weekdays(cls, days: DayChoice | list[int]) -> DayChoice | list[int]:
        if isinstance(days, list):
            if not days or any(not 1 <= d <= 7 for d in days) or len(set(days)) != len(days):
                raise ValueError(
                    "profile.days must be 'all', 'weekdays', 'weekends' or a list of distinct "
                    "ISO weekdays 1 (Monday) to 7 (Sunday)"
                )
            return sorted(days)
        return days

    @model_validator(mode="after")
    def _dates(self) -> ProfileIn:
        if self.date_from > self.date_to:
            raise ValueError(
                f"profile.from {self.date_from} is after profile.to {self.date_to}: "
                "give from on or before to"
            )
        if (self.date_to - self.date_from).days + 1 > MAX_PROFILE_DAYS:
            raise ValueError(
                f"profile from {self.date_from} to {self.date_to} is longer than a year "
                f"({MAX_PROFILE_DAYS} days): pool fewer dates"
            )
        return self


class ReleaseIn(JsonBody):
    """A whole timeslot to release; exactly one of ``epsilon`` and ``max_user_cost``."""

    model_config = ConfigDict(extra="forbid")

    slot_start: str = Field(
        min_length=1,
        max_length=64,
        description="Start of the slot (ISO 8601; naive = the dataset's local time). For "
        "coarser grids, the start of the coarser slot.",
    )
    slots: int = Field(
        default=1,
        ge=1,
        le=10080,
        description="Release this many consecutive slots from slot_start (24 hourly slots: "
        "a day; at most 7 days in all), planned jointly: max_user_cost caps each user's "
        "total over all of them.",
    )
    epsilon: float | None = Field(
        default=None,
        ge=float(MIN_EPSILON),
        allow_inf_nan=False,
        description="Budget per grid; each user pays it once per grid where it is kept.",
    )
    max_user_cost: float | None = Field(
        default=None,
        ge=float(MIN_EPSILON),  # no per-grid epsilon can be smaller
        le=1e6,
        allow_inf_nan=False,
        description="Instead of epsilon: the most any user may pay for the whole release; "
        "dpgate picks the largest per-grid epsilon whose plan stays within it.",
    )
    clip_user: bool = Field(
        default=True,
        description="Plan with Clip-User (docs/math.md, 'Clip-User'): suppress some users "
        "in some grids so that no user is charged in more than K grids.",
    )
    min_users: int = Field(
        default=10,
        ge=1,
        le=2**31 - 1,
        description="Grids with fewer users are skipped: not released, nobody charged.",
    )
    statistics: list[Statistic] = Field(
        default_factory=_both_statistics,
        min_length=1,
        max_length=3,
        description="Statistics to release per grid (user_mean: the mean over the grid's "
        "privacy units of each unit's own mean); each gets an equal share of the epsilon.",
    )
    mechanism: str = Field(
        default="auto", max_length=64, description="Mechanism of every statistic."
    )
    objective: Literal["accuracy", "interval"] | None = Field(
        default=None,
        description=(
            "With mechanism auto: 'accuracy' (the most accurate path; its ci95 is honest but "
            "wide where it clips privately) or 'interval' (per grid, the bounded mechanism "
            "whose honest ci95 is the narrowest, chosen from public counts). Default: "
            "'interval' for an adaptive partition (planned for useful intervals), else "
            "'accuracy'."
        ),
    )
    partition: Literal["fixed", "adaptive"] = Field(
        default="fixed",
        description="'fixed': every grid at h3_resolution. 'adaptive': each fine cell's "
        "records released in exactly one of its H3 ancestors (or itself), no coarser than "
        "coarsest_resolution, chosen from public occupancy: the finest cell whose interval "
        "is useful and that has min_users users (docs/math.md §6.6); released cells are "
        "disjoint.",
    )
    coarsest_resolution: int | None = Field(
        default=None,
        ge=0,
        le=15,
        description="Adaptive only: the coarsest resolution a cell may be released at "
        "(default: three levels coarser than h3_resolution, at least 0).",
    )
    h3_resolution: int | None = Field(
        default=None, ge=0, le=15, description="Release coarser grids: H3 parents."
    )
    slot_minutes: int | None = Field(
        default=None, ge=1, le=1440, description="Release coarser grids: a longer slot."
    )
    split: Literal["half", "optimal"] = Field(
        default="half", description="Clip-User's error split between mean and variance."
    )
    error_target: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    protect_min_error_grid: bool = False
    profile: ProfileIn | None = Field(
        default=None,
        description="A typical day: slot_start is then a local time of day 'HH:MM', and each "
        "released grid pools one cell and one time-of-day slot over every chosen local date "
        "from `from` to `to`. Privacy unit: (user, budget window) on a dataset with a budget "
        "window, each charged in its own window; else the user over all the dates.",
    )
    useful_width: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="A cell is useful when every published ci95 is at most this wide "
        "(default: a fifth of the dataset's value_bound).",
    )

    @field_validator("mechanism")
    @classmethod
    def _today_name(cls, mechanism: str) -> str:
        return canonical_mechanism(mechanism)

    @model_validator(mode="after")
    def _one_budget(self) -> ReleaseIn:
        if (self.epsilon is None) == (self.max_user_cost is None):
            raise ValueError("give exactly one of epsilon and max_user_cost")
        if len(set(self.statistics)) != len(self.statistics):
            raise ValueError("statistics must not repeat")
        if self.objective is None:
            adaptive_auto = self.partition == "adaptive" and self.mechanism == "auto"
            self.objective = "interval" if adaptive_auto else "accuracy"
        return self


class Coverage(BaseModel):
    records: float
    users: float


class Useful(BaseModel):
    width: float = Field(description="useful_width: the widest ci95 counted as useful.")
    records: float = Field(description="Share of the slots' records in useful cells.")
    cells: int = Field(description="Released cells whose every ci95 is at most width wide.")


class GridRelease(BaseModel):
    grid_id: str
    h3_cell: str
    h3_resolution: int
    slot_start: str = Field(description="ISO 8601 with the dataset's local UTC offset.")
    n_users: int
    n_users_suppressed: int = Field(
        description="Users Clip-User or the budget left out of this grid (not charged)."
    )
    mean: StatisticAnswer | None = None
    variance: StatisticAnswer | None = None
    user_mean: StatisticAnswer | None = None


class PlanFields(BaseModel):
    dataset_id: int
    slot_start: str = Field(description="ISO 8601 with the dataset's local UTC offset.")
    h3_resolution: int
    slot_minutes: int
    G1: int = Field(description="Most released grids any user occupies.")
    K: int = Field(description="Most released grids any user is charged in.")
    epsilon: float = Field(description="Per-grid epsilon.")
    max_user_cost: float = Field(description="The largest amount any user pays (K·epsilon).")
    slots: int = Field(default=1, description="Consecutive slots released from slot_start.")
    partition: str = Field(default="fixed", description="'fixed' or 'adaptive'.")
    coarsest_resolution: int | None = Field(
        default=None, description="Adaptive: the coarsest resolution allowed (as asked)."
    )
    coverage: Coverage | None = Field(
        default=None,
        description="Shares of the slots' records and users that lie in released grids "
        "(public: from occupancy).",
    )
    profile: dict[str, Any] | None = Field(
        default=None,
        description="A typical day's profile (`from`, `to`, `days`, `n_days`, "
        "`time_of_day`), or null.",
    )
    useful: Useful | None = Field(
        default=None,
        description="The share of the slots' records, and the number of cells, in released "
        "cells whose every published ci95 is expected at most `width` wide (public "
        "expected widths; the preview's equals the release's).",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="Plain sentences when most of the release is not useful, each saying "
        "what to change.",
    )
    skipped_grids: int = Field(
        description="Grids of the slots whose records are not released (below min_users, "
        "or outside the adaptive partition's cells)."
    )
    statistics: list[str]
    mechanism: str
    objective: str = Field(default="accuracy", description="auto's objective (the body's).")
    clip_user: bool
    min_users: int


class ReleaseOut(PlanFields):
    release_id: str
    grids: list[GridRelease]
    withheld_grids: int = Field(description="Grids whose every user was exhausted.")
    n_users_charged: int
    cached: bool
    epoch: int


class PreviewGrid(BaseModel):
    grid_id: str
    h3_cell: str
    slot_start: str
    n_users: int
    n_users_suppressed: int
    expected_error: float = Field(
        description="Predicted worst-case error of the first statistic (public counts only)."
    )
    expected_errors: dict[str, float] = Field(description="Per statistic.")
    expected_ci95_width: float = Field(
        description=(
            "Width of the first statistic's published ci95 from public counts: exact (before "
            "projection onto the range) for bounded mechanisms and objective=interval, an "
            "upper bound for auto's clipping paths, the range where none is known."
        )
    )
    expected_ci95_widths: dict[str, float] = Field(description="Per statistic.")


class PreviewOut(PlanFields):
    grids: list[PreviewGrid]
    users_over_budget: int = Field(
        description="Users whose remaining budget cannot pay their cost in this plan now."
    )
    largest_epsilon: float = Field(
        description="The largest per-grid epsilon that every user could afford now."
    )


class ReleaseBody(BaseModel):
    """The stored release (GET /releases/{id})."""

    model_config = ConfigDict(extra="allow")

    release_id: str
    grids: list[dict[str, Any]]


class DataPackage(BaseModel):
    """``format=datapackage``: a Frictionless Data Package describing the release's CSV
    and its privacy terms (also ``application/json``)."""

    model_config = ConfigDict(extra="allow")

    profile: str
    name: str
    resources: list[dict[str, Any]]
    privacy: dict[str, Any]


class ReleaseSummary(BaseModel):
    """One stored release in the listing (GET /datasets/{id}/releases)."""

    release_id: str
    slot_start: str = Field(description="Start of its first slot, with the local UTC offset.")
    slots: int = Field(description="Consecutive slots it covers.")
    partition: str = Field(description="`fixed` (one resolution) or `adaptive`.")
    epsilon: float = Field(description="Per-grid epsilon.")
    max_user_cost: float | None = Field(
        description="The most any user paid for it (every release stores it)."
    )
    n_grids: int = Field(description="Grids released.")
    h3_resolution: int | None = Field(
        description="The (finest) H3 resolution of its grids; null for old releases."
    )
    slot_minutes: int | None = Field(description="Length of its slots; null for old releases.")
    created_at: str = Field(description="When it was made, with the local UTC offset.")
    profile: dict[str, Any] | None = Field(
        default=None,
        description="A typical day's profile (`from`, `to`, `days`, `n_days`); then "
        "`slot_start` is its time of day. Null for a release of consecutive slots.",
    )
    useful: dict[str, Any] | None = Field(
        default=None, description="Its `useful` (null for releases made before it)."
    )


class ReleaseList(BaseModel):
    releases: list[ReleaseSummary] = Field(description="Newest first.")
    next: int | None = Field(description="The `offset` of the next page, or null.")
