from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def _quote_examples(schema: dict[str, Any]) -> None:
    from app.queries.openapi import example_quote

    schema["examples"] = [example_quote()]


class QuoteOut(BaseModel):
    """The smallest epsilon whose worst-case error reaches a target. Public counts only:
    asking is free and charges nobody."""

    model_config = ConfigDict(json_schema_extra=_quote_examples)

    grid_id: str
    statistic: str = Field(description="`mean` or `variance`.")
    target_error: float = Field(
        description="The worst-case error asked for, in the values' unit (a variance's "
        "in the unit squared): `worst_case_error` of the answer at the quoted epsilon."
    )
    achievable: bool = Field(
        description="Whether some epsilon up to `max_epsilon_per_query` reaches the target."
    )
    epsilon: float | None = Field(description="Smallest epsilon reaching the target, if any.")
    mechanism: str | None = Field(
        description="The bounded mechanism that reaches it at that epsilon, if any."
    )
    auto_epsilon: float | None = Field(
        default=None,
        description="Smallest epsilon at which `auto` is predicted to reach the target as "
        "its *expected* absolute error (not a worst case): a model from public counts, "
        "calibrated on real grids by benchmarks/accuracy.py (docs/math.md §11). Null when "
        "even `max_epsilon_per_query` is not predicted to reach it.",
    )
    max_epsilon_per_query: float = Field(description="The dataset's largest epsilon per query.")


class StoredAnswer(BaseModel):
    """One stored answer of the calling key, as listed by ``GET /queries``."""

    query_id: str = Field(description="The answer's id (`query_id` of the answer).")
    dataset_id: int
    grid_id: str
    statistic: str = Field(description="`mean` or `variance`.")
    mechanism: str = Field(description="The mechanism that produced it (auto resolved).")
    epsilon: float = Field(description="What it charged each user it used.")
    epoch: int = Field(description="The budget epoch it was charged in.")
    created_at: str = Field(
        description="When it was answered: ISO 8601 local time with the dataset's offset."
    )
    reusable: bool = Field(
        description="True when asking the same query again now returns this answer for "
        "free (same budget epoch, grid unchanged since)."
    )
    answer: dict[str, Any] = Field(
        description="The stored answer itself, as first returned (see `StatisticAnswer`), "
        "with `cached: true`."
    )


class StoredAnswerList(BaseModel):
    queries: list[StoredAnswer] = Field(description="Newest first.")
    total: int = Field(description="Stored answers of this key matching the filters.")
    limit: int
    offset: int
    next: int | None = Field(description="The `offset` of the next page, or null.")
