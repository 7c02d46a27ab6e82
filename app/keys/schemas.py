from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    role: Literal["admin", "analyst"]
    epsilon_quota: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        le=1e6,
        description="Total epsilon this key may spend; null for no quota.",
    )


class KeyCreated(BaseModel):
    id: int
    key: str = Field(description="The secret key; shown once, stored only as a hash.")
    role: str
    name: str
    epsilon_quota: float | None
