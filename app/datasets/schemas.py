from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.kit.json_numbers import JsonBody
from app.time.budget_windows import BudgetWindow
from app.time.slots import is_valid_timezone

BUDGET_WINDOW_DESCRIPTION = (
    "`none`: one budget per user for all time (an admin resets it). `day`, `week` (ISO, "
    "Monday to Sunday) or `month`: `budget_per_user` is per user and per window of the "
    "data's time in the dataset's timezone, and a grid (a query or a release of it) is "
    "charged to the window its slot lies in. The privacy unit is then one user in one "
    "window (`privacy_unit` of every answer): a user present in d windows is protected "
    "at d·budget_per_user over them together (docs/math.md §10.4)."
)


VALUE_UNIT_DESCRIPTION = (
    "The values' unit (e.g. `m/s`, `km/h`), echoed as `unit` in every statistic answer, "
    "release export and map (a variance is in its square); null: not stated."
)

RETENTION_DESCRIPTION = (
    "Days the raw records are kept (null: for ever). Older ones are dropped a whole UTC "
    "month at a time, once every grid of that month has its snapshot stored: grids, "
    "queries, releases and coarser grids keep working from the snapshots; an upload "
    "into a dropped month is refused (409)."
)


class DatasetCreate(JsonBody):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    value_bound: float = Field(
        gt=0, le=1e12, allow_inf_nan=False, description="U: every value is clamped to [0, U]."
    )
    h3_resolution: int = Field(default=8, ge=0, le=15)
    timeslot_minutes: int = Field(
        default=60, ge=1, le=1440, description="Slot length; must divide 1440."
    )
    timezone: str = Field(
        default="UTC",
        max_length=64,
        description="IANA zone; slots start at local-time boundaries and naive timestamps "
        "are local time.",
    )
    budget_per_user: float = Field(gt=0, le=1e6, allow_inf_nan=False)
    max_epsilon_per_query: float = Field(default=10.0, gt=0, le=1e6, allow_inf_nan=False)
    on_exhausted: Literal["refuse", "exclude"] = "refuse"
    value_filters_public: bool = Field(
        default=False,
        description="Allow the upload options that decide from a record's value whether it "
        "exists (`drop_zero`, `out_of_range=reject`). The grid listing and every count-based "
        "choice then depend on values, without noise: declare it only when which values "
        "are zero or out of range is public (SECURITY.md).",
    )

    budget_window: BudgetWindow = Field(default="none", description=BUDGET_WINDOW_DESCRIPTION)
    value_unit: str | None = Field(
        default=None,
        min_length=1,
        max_length=40,
        pattern=r"^[^\x00-\x1f\x7f]+$",  # one printable line: it lands in CSV and HTML
        description=VALUE_UNIT_DESCRIPTION,
    )
    raw_retention_days: int | None = Field(
        default=None, ge=1, le=36500, strict=True, description=RETENTION_DESCRIPTION
    )

    @field_validator("timeslot_minutes")
    @classmethod
    def _divides_day(cls, v: int) -> int:
        if 1440 % v:
            raise ValueError("timeslot_minutes must divide 1440 (e.g. 15, 30, 60, 120, 1440)")
        return v

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        if not is_valid_timezone(v):
            raise ValueError(f"unknown IANA time zone {v!r} (e.g. 'Asia/Kolkata', 'UTC')")
        return v


class DatasetOut(BaseModel):
    id: int
    name: str
    value_bound: float
    h3_resolution: int
    timeslot_minutes: int
    timezone: str
    budget_per_user: float
    max_epsilon_per_query: float
    on_exhausted: str
    value_filters_public: bool
    budget_window: BudgetWindow = Field(description=BUDGET_WINDOW_DESCRIPTION)
    value_unit: str | None = Field(description=VALUE_UNIT_DESCRIPTION)
    privacy_unit: str = Field(
        description="What one unit of protection is: `user`, or `user-day`, `user-week`, "
        "`user-month` with a budget window."
    )
    epoch: int
    created_at: datetime
    raw_retention_days: int | None = Field(default=None, description=RETENTION_DESCRIPTION)
    raw_kept_from: datetime | None = Field(
        default=None,
        description="Raw records before this instant were dropped by retention (null: "
        "none): their grids are final, and an upload into them is refused (409).",
    )


class DatasetDetail(DatasetOut):
    n_users: int = Field(description="Distinct data subjects with at least one record.")
    n_grids: int
    n_records: int


class DatasetList(BaseModel):
    datasets: list[DatasetOut]


class GridOut(BaseModel):
    grid_id: str = Field(description="Opaque grid id, unique across datasets.")
    h3_cell: str
    slot_start: str = Field(description="ISO 8601 with the dataset's local UTC offset.")
    n_users: int
    n_records: int
    max_user_records: int


class GridList(BaseModel):
    grids: list[GridOut]
    limit: int
    offset: int
    next: int | None = Field(description="The `offset` of the next page, or null.")
