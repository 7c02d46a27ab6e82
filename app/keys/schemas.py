from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.kit.json_numbers import JsonBody


class KeyCreate(JsonBody):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    role: Literal["admin", "analyst", "viewer"] = Field(
        description="`admin`, `analyst`, or `viewer`: reads datasets, grid listings, budgets "
        "and releases, and never spends (403 on queries, quotes, previews and releases)."
    )
    epsilon_quota: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        le=1e6,
        description="Total epsilon this key may spend; null for no quota (and for a viewer).",
    )

    @model_validator(mode="after")
    def _viewer_spends_nothing(self) -> KeyCreate:
        if self.role == "viewer" and self.epsilon_quota is not None:
            raise ValueError("a viewer never spends: leave epsilon_quota null")
        return self


class KeyCreated(BaseModel):
    id: int
    key: str = Field(description="The secret key; shown once, stored only as a hash.")
    role: str
    name: str
    epsilon_quota: float | None


class KeyOut(BaseModel):
    """A key as admins see it (never its secret)."""

    id: int
    name: str
    role: str
    prefix: str = Field(description="The key's first characters, to recognise it.")
    epsilon_quota: float | None
    epsilon_spent: float = Field(
        description="Epsilon spent: against the quota; without one, counted from the ledger "
        "as a quota would count it (answers that charged no user excepted)."
    )
    revoked: bool
    created_at: datetime
    revoked_at: datetime | None


class KeyList(BaseModel):
    keys: list[KeyOut]


class KeyMe(BaseModel):
    """The calling key."""

    id: int
    name: str
    role: str
    epsilon_quota: float | None
    epsilon_spent: float
    epsilon_remaining: float | None = Field(description="Left of the quota; null without one.")
