from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class StatisticAnswer(BaseModel):
    """A DP answer (API.md). Bounds are worst cases over all data with this occupancy."""

    query_id: str = Field(description="Id of the stored answer; its ledger entry refers to it.")
    grid_id: str
    statistic: str = Field(description="'mean' or 'variance'")
    mechanism: str = Field(description="The mechanism that produced the estimate (auto resolved).")
    requested_mechanism: str
    epsilon: float
    estimate: float
    sensitivity: float = Field(description="User-level sensitivity of the noised estimator.")
    noise_scale: float = Field(description="The Laplace scale b actually used.")
    worst_case_bias: float | None
    worst_case_error: float | None
    ci95: list[float] | None = Field(
        description=(
            "A 95% interval for the grid's true value: estimate ± (b ln 20 + worst-case bias) "
            "before projection, both ends in [0, U] (mean) or [0, U²/4] (variance). Null "
            "where the mechanism has no data-independent bias bound (see ci95_note)."
        )
    )
    ci95_note: str | None = Field(
        default=None,
        description="Why ci95 is null (one sentence); null when an interval is given.",
    )
    n_users: int
    n_users_charged: int
    cached: bool
    epoch: int
    options: dict[str, Any]
    details: dict[str, Any]


class QuoteOut(BaseModel):
    grid_id: str
    statistic: str
    target_error: float
    achievable: bool
    epsilon: float | None = Field(description="Smallest epsilon reaching the target, if any.")
    mechanism: str | None
    max_epsilon_per_query: float
