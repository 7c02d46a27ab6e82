"""The schema of one statistic's answer (``StatisticAnswer``), with real examples."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def _answer_examples(schema: dict[str, Any]) -> None:
    from app.answers.examples import example_answer  # real answers, made on first use

    schema["examples"] = [example_answer(s) for s in ("mean", "variance", "user_mean")]


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
    h3_cell: str | None = Field(
        default=None,
        description="The grid's H3 cell (a query's answer; a release's grid carries it).",
    )
    slot_start: str | None = Field(
        default=None,
        description="The grid's slot start in the dataset's local time, ISO 8601 with its "
        "offset (a query's answer; a release's grid carries it).",
    )
    statistic: str = Field(
        description="`mean`, `variance` (population variance) or `user_mean` (the mean over "
        "the grid's privacy units of each unit's own mean)."
    )
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
        "for a mean and a user_mean, [0, U²/4] for a variance (U: the dataset's "
        "`value_bound`)."
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
        "range. `auto`'s mechanisms (`user_window`, `centred_clip`, the `window` and "
        "`centred` variances) clip at a private level: their interval bounds what the "
        "clipping moved with probability "
        "0.99 and the noise with 0.96, so it holds the truth at least 95% of the time on "
        "every dataset, but is wide on small grids (docs/math.md §11.6). For the narrowest "
        "honest interval ask auto with `objective=interval`. Null where the mechanism has "
        "no such bound (levy, quantile): `ci95_note` then says why."
    )
    ci95_note: str | None = Field(
        default=None,
        description="Why `ci95` is null, or why it is the whole range (one sentence); "
        "null otherwise.",
    )
    n_users: int = Field(description="Users with records in the grid (public occupancy).")
    n_users_charged: int = Field(
        description="Users whose records the answer used and who were charged `epsilon` "
        "(fewer than `n_users` when exhausted users are excluded or a plan suppressed some)."
    )
    privacy_unit: str = Field(
        description="What one unit of protection is: `user` (all of a user's records, "
        "whenever they were made), or `user-day`, `user-week`, `user-month` for a dataset "
        "with a budget window: all of one user's records in one window of the data's time "
        "(the dataset's timezone). With a window, a user's answers about different windows "
        "add up: a user present on d days of a `day` dataset is protected at d times "
        "`budget_per_user` over those days together (docs/math.md §10.4)."
    )
    unit: str | None = Field(
        description="The values' unit (the dataset's `value_unit`; a variance is in its "
        "square); null when the dataset states none."
    )
    cached: bool = Field(
        description="True when this is a stored answer returned again: nothing was charged."
    )
    epoch: int = Field(description="The dataset's budget epoch the answer was charged in.")
    options: dict[str, Any] = Field(description="The mechanism options used (defaults filled).")
    details: dict[str, Any] = Field(
        description="Mechanism internals (chosen m, intervals, auto's reason), for experts."
    )
