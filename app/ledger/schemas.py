from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BudgetOut(BaseModel):
    budget_per_user: float
    max_spent: float = Field(description="The largest spend of any user in this epoch.")
    users_at_cap: int = Field(description="Users whose spend has reached budget_per_user.")
    epoch: int
    users_charged: int = Field(description="Users charged at least once in this epoch.")


class LedgerUser(BaseModel):
    user: str = Field(description="The keyed hash (HMAC-SHA256) of the user's identifier.")
    spent: float
    spent_exact: str = Field(description="The exact decimal spend.")


class LedgerOut(BaseModel):
    epoch: int
    total: int
    users: list[LedgerUser]


class ResetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=2000)


class ResetOut(BaseModel):
    epoch: int
