"""What the dpgate client returns: typed answers that keep any field a newer server adds.

Every model accepts (and keeps, as attributes) fields it does not name, so a server
that adds fields never breaks the client; fields a server may omit default to None.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Budget",
    "Dataset",
    "Grid",
    "KeyInfo",
    "Quote",
    "Release",
    "ReleaseGrid",
    "ReleasePreview",
    "ReleaseSummary",
    "StatisticAnswer",
    "StoredAnswer",
    "UploadResult",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, protected_namespaces=())


class Dataset(_Model):
    id: int
    name: str
    value_bound: float | None = None
    h3_resolution: int | None = None
    timeslot_minutes: int | None = None
    timezone: str | None = None
    budget_per_user: float | None = None
    max_epsilon_per_query: float | None = None
    on_exhausted: str | None = None
    value_unit: str | None = None


class Grid(_Model):
    grid_id: str
    h3_cell: str
    slot_start: str
    n_users: int
    n_records: int | None = None
    max_user_records: int | None = None


class StatisticAnswer(_Model):
    """A DP answer: ``estimate`` with its noise scale, bounds and 95% interval."""

    grid_id: str
    statistic: str
    mechanism: str
    epsilon: float
    estimate: float
    h3_cell: str | None = None
    slot_start: str | None = None
    sensitivity: float
    noise_scale: float
    worst_case_bias: float | None = None
    worst_case_error: float | None = None
    ci95: list[float] | None = None
    ci95_note: str | None = None
    n_users: int
    n_users_charged: int
    cached: bool
    query_id: str | None = None
    unit: str | None = None


class Quote(_Model):
    grid_id: str
    statistic: str
    target_error: float
    achievable: bool
    epsilon: float | None = None
    mechanism: str | None = None


class ReleaseGrid(_Model):
    grid_id: str
    h3_cell: str | None = None
    h3_resolution: int | None = None
    slot_start: str | None = None
    n_users: int | None = None
    mean: StatisticAnswer | None = None
    variance: StatisticAnswer | None = None
    user_mean: StatisticAnswer | None = None
    expected_error: float | None = None
    expected_ci95_width: float | None = None


class Coverage(_Model):
    records: float
    users: float


class Useful(_Model):
    """The share of the slots' records, and the cells, whose every ci95 is at most
    ``width`` wide (expected from public counts: the preview's equals the release's)."""

    width: float
    records: float
    cells: int


class Profile(_Model):
    """A typical day: ``slot_start`` is then a local time of day pooled over ``n_days``
    dates from ``from`` to ``to`` (``days``: all, weekdays, weekends or ISO weekdays)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    date_from: str = Field(alias="from")
    date_to: str = Field(alias="to")
    days: str | list[int] = "all"
    n_days: int | None = None


class Release(_Model):
    release_id: str
    slot_start: str | None = None
    slots: int | None = None
    partition: str | None = None
    profile: Profile | None = None
    coverage: Coverage | None = None
    useful: Useful | None = None
    warnings: list[str] = []
    epsilon: float | None = None
    max_user_cost: float | None = None
    grids: list[ReleaseGrid] = []
    skipped_grids: Any = None
    cached: bool | None = None

    def to_dataframe(self) -> Any:
        """One row per grid as a pandas DataFrame (``dpgate.frames``; needs pandas)."""
        from dpgate.frames import release_dataframe

        return release_dataframe(self)

    def to_geodataframe(self) -> Any:
        """The grids' H3 hexagons and values as a GeoPandas GeoDataFrame (needs geopandas)."""
        from dpgate.frames import release_geodataframe

        return release_geodataframe(self)


class ReleaseSummary(_Model):
    """A release as listed (``GET /datasets/{id}/releases``, ``GET /public/releases``);
    :meth:`dpgate.Client.get_release` reads it whole."""

    release_id: str
    slot_start: str | None = None
    slots: int | None = None
    partition: str | None = None
    epsilon: float | None = None
    max_user_cost: float | None = None
    n_grids: int | None = None
    created_at: str | None = None
    dataset: int | None = None
    profile: Profile | None = None
    useful: Useful | None = None


class ReleasePreview(_Model):
    slots: int | None = None
    partition: str | None = None
    profile: Profile | None = None
    coverage: Coverage | None = None
    useful: Useful | None = None
    warnings: list[str] = []
    epsilon: float | None = None
    max_user_cost: float | None = None
    grids: list[ReleaseGrid] = []
    skipped_grids: Any = None
    users_over_budget: Any = None


class Budget(_Model):
    budget_per_user: float
    max_spent: float
    users_at_cap: int
    epoch: int


class KeyInfo(_Model):
    id: int
    name: str
    role: str
    epsilon_quota: float | None = None
    epsilon_spent: float | None = None
    epsilon_remaining: float | None = None


class StoredAnswer(_Model):
    """One of the key's stored answers (``GET /queries``); ``answer`` re-read for free."""

    query_id: str
    grid_id: str
    statistic: str
    mechanism: str
    epsilon: float
    created_at: str
    reusable: bool
    answer: StatisticAnswer


class UploadResult(_Model):
    accepted: int
    rejected: int
    clamped: int | None = None
    duplicates: int | None = None
    errors: list[dict[str, Any]] = []
