from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.queries.schemas import StatisticAnswer


class ReleaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    slot_start: datetime = Field(description="Start of the timeslot (ISO 8601 with offset).")
    epsilon: float = Field(description="Budget per grid; each user pays it once per kept grid.")
    clip_user: bool = Field(default=True, description="Run Clip-User (004 Alg. 1) first.")
    split: str = Field(default="half", pattern="^(half|optimal)$")
    error_target: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    protect_min_error_grid: bool = False


class GridRelease(BaseModel):
    grid_id: str
    h3_cell: str
    mean: StatisticAnswer
    variance: StatisticAnswer


class ReleaseOut(BaseModel):
    release_id: str
    slot_start: str
    epsilon: float
    clip_user: bool
    G1: int
    K: int
    E: float
    E_bar: float
    max_user_cost: float = Field(description="Largest epsilon any user pays (at most K·eps).")
    n_users_charged: int
    removed: list[tuple[str, str]] = Field(description="[grid_id, user hash] suppressed pairs.")
    grids: list[GridRelease]
    withheld: list[str] = Field(description="Grids left out: all their users were exhausted.")
    cached: bool
    epoch: int
    options: dict[str, Any]
