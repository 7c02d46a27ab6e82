from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def _answer_examples(schema: dict[str, Any]) -> None:
    from app.queries.openapi import example_answer  # real answers, made on first use

    schema["examples"] = [example_answer("mean"), example_answer("variance")]


def _quote_examples(schema: dict[str, Any]) -> None:
    from app.queries.openapi import example_quote

    schema["examples"] = [example_quote()]


class StatisticAnswer(BaseModel):
    """A differentially private answer about one grid (one H3 cell during one timeslot).

    The estimate is the true statistic of the grid's records after bounding each user's
    influence, plus Laplace noise; every user whose records it used was charged
    `epsilon`. The bounds are worst cases over every dataset with this grid's public
    occupancy (how many records each user has), whatever the values."""

    model_config = ConfigDict(json_schema_extra=_answer_examples)

    query_id: str = Field(
        description="Id of this stored answer (its ledger entries refer to it). The same "
        "query asked again in the same budget epoch returns it for free; `GET /queries` "
        "lists the answers of your key."
    )
    grid_id: str = Field(description="The grid (H3 cell × timeslot) the answer is about.")
    statistic: str = Field(description="`mean` or `variance` (population variance).")
    mechanism: str = Field(
        description="The mechanism that produced the estimate (for `auto`, the one it chose)."
    )
    requested_mechanism: str = Field(description="The mechanism asked for (e.g. `auto`).")
    epsilon: float = Field(
        description="The privacy loss of this answer: what was charged to each user whose "
        "records it used (smaller is more private and noisier)."
    )
    estimate: float = Field(
        description="The private estimate, projected onto the statistic's range: [0, U] "
        "for a mean, [0, U²/4] for a variance (U: the dataset's `value_bound`)."
    )
    sensitivity: float = Field(
        description="User-level sensitivity: the most the noised statistic can change when "
        "one user's records (all of them) are added or removed. The noise is scaled to it."
    )
    noise_scale: float = Field(
        description="The scale b of the Laplace noise added (its standard deviation is "
        "b·√2). `sensitivity / epsilon` when the whole epsilon goes to the statistic; "
        "mechanisms that spend part of epsilon on a private interval (levy, quantile) "
        "use a larger b."
    )
    worst_case_bias: float | None = Field(
        description="The largest systematic error that bounding users' contributions "
        "(clipping, projecting, arrays) can cause on any data with this occupancy; 0 when "
        "every record is used as it is, null when the mechanism has no such bound."
    )
    worst_case_error: float | None = Field(
        description="A bound on the expected absolute error |estimate − true value| on any "
        "data with this occupancy: worst-case bias plus b, the noise's expected size. Null "
        "when the mechanism has no such bound (its choices depend on private steps)."
    )
    ci95: list[float] | None = Field(
        description="A 95% interval [lo, hi] meant to hold the grid's true value 95% of "
        "the time: the Laplace noise's 95% range around the estimate (± b·ln 20) widened by "
        "the worst-case bias of clipping or projection, then projected onto the statistic's "
        "range. Null where the mechanism has no data-independent bias bound (its clipping "
        "level is chosen privately): `ci95_note` then says why."
    )
    ci95_note: str | None = Field(
        default=None,
        description="Why `ci95` is null (one sentence); null when an interval is given.",
    )
    n_users: int = Field(description="Users with records in the grid (public occupancy).")
    n_users_charged: int = Field(
        description="Users whose records the answer used and who were charged `epsilon` "
        "(fewer than `n_users` when exhausted users are excluded or a plan suppressed some)."
    )
    cached: bool = Field(
        description="True when this is a stored answer returned again: nothing was charged."
    )
    epoch: int = Field(description="The dataset's budget epoch the answer was charged in.")
    options: dict[str, Any] = Field(description="The mechanism options used (defaults filled).")
    details: dict[str, Any] = Field(
        description="Mechanism internals (chosen m, intervals, auto's reason), for experts."
    )


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
