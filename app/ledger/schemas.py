from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.kit.json_numbers import JsonBody

WINDOW_FIELD = Field(
    description="The budget window shown, by its first local date (`2016-11-25`; a week "
    "starts on Monday, a month on the 1st); null for a dataset without windows."
)
BUDGET_WINDOW_FIELD = Field(description="The dataset's `budget_window`.")
PRIVACY_UNIT_FIELD = Field(
    description="What one unit of protection is: `user`, or `user-day` and the like."
)


class BudgetOut(BaseModel):
    budget_per_user: float
    max_spent: float = Field(
        description="The largest spend of any user in this epoch (and window)."
    )
    users_at_cap: int = Field(description="Users whose spend has reached budget_per_user.")
    epoch: int
    users_charged: int = Field(
        description="Users charged at least once in this epoch (and window)."
    )
    window: str | None = WINDOW_FIELD
    budget_window: str = BUDGET_WINDOW_FIELD
    privacy_unit: str = PRIVACY_UNIT_FIELD


class LedgerUser(BaseModel):
    user: str = Field(description="The keyed hash (HMAC-SHA256) of the user's identifier.")
    spent: float
    spent_exact: str = Field(description="The exact decimal spend.")


class LedgerOut(BaseModel):
    epoch: int
    window: str | None = WINDOW_FIELD
    budget_window: str = BUDGET_WINDOW_FIELD
    privacy_unit: str = PRIVACY_UNIT_FIELD
    total: int
    users: list[LedgerUser]


class ResetIn(JsonBody):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=2000)


class ResetOut(BaseModel):
    epoch: int
