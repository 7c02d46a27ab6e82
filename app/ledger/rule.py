"""The ledger's events and the decision of a charge, pure (docs/math.md §10).

:func:`charge_verdict` is the one decision, in the order it checks; ``dpgate_commit_query``
(``migrations/sql/commit_query_0009.sql``) makes the same decisions in SQL, held equal by
``tests/integration/test_ledger_commit.py``. :func:`refusal` is the one error a refusal becomes."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Literal

from app import budget
from app.budget import Budget
from app.kit.errors import BudgetExhausted

ChargeKind = Literal["query", "release"]


@dataclass(frozen=True)
class Charge:
    """``epsilon`` to each of ``users`` (distinct, ascending) in one budget window."""

    dataset_id: int
    epoch: int
    window: date
    users: tuple[int, ...]
    epsilon: Decimal
    key_id: int
    kind: ChargeKind
    grid_id: int | None = None

    @classmethod
    def of(
        cls,
        dataset_id: int,
        epoch: int,
        users: Iterable[int],
        epsilon: Decimal,
        *,
        window: date,
        key_id: int,
        kind: ChargeKind,
        grid_id: int | None = None,
    ) -> Charge:
        return cls(
            dataset_id,
            epoch,
            window,
            tuple(sorted({int(u) for u in users})),
            epsilon,
            key_id,
            kind,
            grid_id,
        )


def over_cap(charge: Charge, spent: Mapping[int, Decimal], cap: Decimal) -> list[int]:
    """The users of ``charge`` it would push past ``cap``."""
    return budget.over_cap(charge.users, spent, charge.epsilon, cap)


class Verdict(enum.Enum):
    """What a query commit did: ``OK``, or why it wrote nothing."""

    OK = "ok"
    STALE = "stale"  # the dataset's epoch moved on since the look-up
    MISSING = "missing"  # some budget accounts do not exist yet
    TWIN = "twin"  # the same query was stored meanwhile (served, not charged)
    EXHAUSTED = "exhausted"  # a user would pass the cap
    QUOTA = "quota"  # the key would pass its quota


def charge_verdict(
    charge: Charge,
    *,
    epoch_now: int,
    accounts: Mapping[int, Decimal],
    cap: Decimal,
    twin: bool,
    quota: Budget | None,
) -> Verdict:
    """The decision of a charge from what it read under its locks, in this order: epoch, accounts
    present, twin answer, users' caps, key quota."""
    if epoch_now != charge.epoch:
        return Verdict.STALE
    if any(u not in accounts for u in charge.users):
        return Verdict.MISSING
    if twin:
        return Verdict.TWIN
    if over_cap(charge, accounts, cap):
        return Verdict.EXHAUSTED
    if quota is not None and not quota.fits(charge.epsilon):
        return Verdict.QUOTA
    return Verdict.OK


def refusal(
    verdict: Verdict,
    *,
    scope: str,
    over: int | None = None,
    key_name: str = "",
    largest_epsilon: float | None = None,
    release: bool = False,
) -> BudgetExhausted:
    """The 403 ``budget_exhausted`` of a refused charge: ``EXHAUSTED`` (``over`` users of ``scope``;
    0: all exhausted; None: not counted) or ``QUOTA`` (key ``key_name``)."""
    if verdict is Verdict.QUOTA:
        message = f"key '{key_name}' would exceed its epsilon quota"
    elif verdict is not Verdict.EXHAUSTED:
        raise ValueError(f"{verdict} is not a refusal")
    elif over == 0:
        message = f"every user of {scope} has exhausted the privacy budget"
    else:
        who = "a user" if over is None else f"{over} user(s)"
        message = f"{who} of {scope} would pass the privacy budget"
    return BudgetExhausted(message, largest_epsilon=largest_epsilon, release=release)
