"""A release body read once: every field parsed and checked against its dataset, and the
defaults that depend on the dataset filled in. The endpoints build a
:class:`ReleaseRequest` from the body (``ReleaseIn``) before anything is read or planned;
every later step reads this value and never the body. A refusal is a 400 naming the
field, and nothing has been read or charged by then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from app import budget
from app.answers.epsilon import MIN_EPSILON, EpsilonAmount, parse_epsilon
from app.answers.options import parse_options
from app.datasets.coarse import GridLevel, grid_level
from app.datasets.models import Dataset
from app.datasets.service import parse_slot_start
from app.kit.errors import InvalidRequest
from app.releases.adaptive import DEFAULT_LEVELS
from app.releases.profiles import Profile, parse_profile
from app.releases.schemas import ReleaseIn

#: ``useful_width``'s default: this share of the value range ``U``.
DEFAULT_USEFUL_SHARE = 0.2


@dataclass(frozen=True)
class ReleaseRequest:
    """What a release body asks for, in the dataset's terms (docs/math.md §6.5–6.7)."""

    dataset: Dataset
    start: datetime  # UTC: the first slot's start (a profile: on its first date)
    slots: int
    level: GridLevel | None  # None: the dataset's own grids
    h3_resolution: int  # of the grids asked (the finest, when adaptive)
    slot_minutes: int
    eps: EpsilonAmount | None  # per grid, when given
    cost_cap: Decimal | None  # max_user_cost, when given instead
    statistics: tuple[str, ...]
    mechanism: str
    objective: str
    options: dict[str, Any]  # each grid's mechanism options (auto's objective)
    partition: str
    coarsest_resolution: int  # adaptive: the coarsest allowed (the default filled in)
    clip_user: bool
    min_users: int
    split: str
    error_target: float | None
    protect_min_error_grid: bool
    useful_width: float
    profile: Profile | None
    asked: dict[str, Any]  # the body as sent (the idempotency fingerprint reads it)

    @property
    def n_statistics(self) -> int:
        return len(self.statistics)

    @property
    def for_intervals(self) -> bool:
        """Whether users are suppressed for useful intervals (docs/math.md §6.7) rather than
        by Clip-User's error rule: ``auto`` with ``objective: interval`` and ``clip_user``."""
        return self.mechanism == "auto" and self.objective == "interval" and self.clip_user

    @property
    def value_bound(self) -> float:
        return float(self.dataset.value_bound)

    @property
    def max_epsilon(self) -> Decimal:
        return Decimal(self.dataset.max_epsilon_per_query)


def mechanism_options(mechanism: str, objective: str) -> dict[str, Any]:
    """The options every grid's mechanism runs with (auto's objective)."""
    if mechanism == "auto":
        return {"objective": objective}
    if objective != "accuracy":
        raise InvalidRequest("objective applies to mechanism auto only; drop it or use auto")
    return {}


def _budget(body: ReleaseIn, dataset: Dataset) -> tuple[EpsilonAmount | None, Decimal | None]:
    if body.epsilon is not None:
        return parse_epsilon(body.epsilon, dataset.max_epsilon_per_query), None
    if body.max_user_cost is None:  # the schema asks for one of the two
        raise InvalidRequest("give epsilon or max_user_cost")
    cap = budget.limit(body.max_user_cost)
    if cap < MIN_EPSILON:
        raise InvalidRequest(f"max_user_cost must be at least {MIN_EPSILON}")
    return None, cap


def _coarsest(body: ReleaseIn, finest: int) -> int:
    if body.partition == "fixed":
        if body.coarsest_resolution is not None:
            raise InvalidRequest('coarsest_resolution applies to "partition": "adaptive" only')
        return finest
    if body.coarsest_resolution is None:
        return max(0, finest - DEFAULT_LEVELS)
    if body.coarsest_resolution > finest:
        raise InvalidRequest(
            f"coarsest_resolution {body.coarsest_resolution} is finer than the release's "
            f"h3_resolution {finest}: give one between 0 and {finest}"
        )
    return body.coarsest_resolution


def _useful_width(body: ReleaseIn, U: float) -> float:
    """The body's ``useful_width``, or a fifth of ``U`` (any positive width is accepted:
    one wider than a statistic's range just counts every cell)."""
    return DEFAULT_USEFUL_SHARE * U if body.useful_width is None else float(body.useful_width)


def parse_release(body: ReleaseIn, dataset: Dataset) -> ReleaseRequest:
    """``body`` read once against ``dataset`` (400 naming the field on any bad value)."""
    objective = body.objective or "accuracy"
    options = mechanism_options(body.mechanism, objective)
    for statistic in body.statistics:
        parse_options(statistic, body.mechanism, options)
    level = grid_level(dataset, body.h3_resolution, body.slot_minutes)
    res = dataset.h3_resolution if level is None else level.h3_resolution
    minutes = dataset.timeslot_minutes if level is None else level.slot_minutes
    eps, cap = _budget(body, dataset)
    profile = None
    if body.profile is None:
        start = parse_slot_start(dataset, body.slot_start, minutes)
    else:
        profile = parse_profile(body.profile, body.slot_start, body.slots, minutes, dataset)
        start = profile.first_start
    asked = body.model_dump(mode="json", exclude={"slot_start"})
    for added in ("profile", "useful_width"):  # fingerprints of bodies without them stay
        if asked.get(added) is None:
            asked.pop(added, None)
    return ReleaseRequest(
        dataset=dataset,
        start=start,
        slots=body.slots,
        level=level,
        h3_resolution=res,
        slot_minutes=minutes,
        eps=eps,
        cost_cap=cap,
        statistics=tuple(body.statistics),
        mechanism=body.mechanism,
        objective=objective,
        options=options,
        partition=body.partition,
        coarsest_resolution=_coarsest(body, res),
        clip_user=body.clip_user,
        min_users=body.min_users,
        split=body.split,
        error_target=body.error_target,
        protect_min_error_grid=body.protect_min_error_grid,
        useful_width=_useful_width(body, float(dataset.value_bound)),
        profile=profile,
        asked=asked,
    )
