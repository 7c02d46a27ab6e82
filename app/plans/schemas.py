from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict, StrictInt

from app.kit.json_numbers import JsonBody

Id = int | str


class PreviewIn(JsonBody):
    model_config = ConfigDict(extra="forbid")

    value_bound: float = Field(gt=0, allow_inf_nan=False, le=1e12)
    epsilon: float = Field(ge=1e-6, allow_inf_nan=False, le=1e6)  # MIN_EPSILON of queries
    # a triple is a JSON array (read as a tuple); its count a JSON integer
    occupancy: list[Annotated[tuple[Id, Id, StrictInt], Strict(False)]] = Field(
        min_length=1,
        max_length=2_000_000,
        description="[grid, user, count] triples: how many records each user has in each grid "
        "(the count a JSON integer).",
    )
    error_target: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    protect_min_error_grid: bool = False
    split: str = Field(default="half", pattern="^(half|optimal)$")


class PreviewOut(BaseModel):
    G1: int = Field(description="Most grids any user occupies (cost G1·eps without Clip-User).")
    K: int = Field(description="Most grids any user is kept in after Clip-User (cost K·eps).")
    E: float = Field(description="Largest worst-case error before Clip-User (or the target).")
    E_bar: float = Field(description="Largest worst-case error after the pseudo-user step.")
    removed: list[tuple[Id, Id]] = Field(description="Suppressed [grid, user] pairs, in order.")
    m: dict[str, int] = Field(description="Pseudo-user clipping bound m per grid.")
