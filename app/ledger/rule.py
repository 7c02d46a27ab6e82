"""The budget rule, pure: a charge, and whether it would pass a cap.

A :class:`Charge` is one event of the ledger (in the spirit of dp_accounting's
``DpEvent``): ``epsilon`` to each of some users of one dataset and epoch. Budgets
are exact decimals (Tumult Analytics' ``PrivacyBudget`` value types play this
role there), so ``spent + epsilon > cap`` is decided without rounding. Which users
are exhausted depends only on the ledger, never on values (API.md "Guarantees").

:func:`query_verdict` is the order in which a query commit checks things; the
Postgres function ``dpgate_commit_query`` (``app/ledger/sql/commit_query.sql``)
makes exactly these decisions in one statement, and
``tests/integration/test_ledger_commit.py`` holds the two to the same verdicts.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import numpy as np
import numpy.typing as npt

ChargeKind = Literal["query", "release"]


@dataclass(frozen=True)
class Charge:
    """``epsilon`` to each of ``users`` (distinct, ascending) of one dataset and epoch."""

    dataset_id: int
    epoch: int
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
        key_id: int,
        kind: ChargeKind,
        grid_id: int | None = None,
    ) -> Charge:
        return cls(
            dataset_id,
            epoch,
            tuple(sorted({int(u) for u in users})),
            epsilon,
            key_id,
            kind,
            grid_id,
        )


def would_exceed(spent: Decimal, epsilon: Decimal, cap: Decimal) -> bool:
    """Whether charging ``epsilon`` on top of ``spent`` passes ``cap`` (reaching it is fine)."""
    return spent + epsilon > cap


def exhausted(
    spent: Mapping[int, Decimal], user_ids: npt.ArrayLike, epsilon: Decimal, cap: Decimal
) -> npt.NDArray[np.bool_]:
    """Bool per user of ``user_ids``: would ``epsilon`` more pass ``cap``? (users without
    an entry in ``spent`` have spent nothing)"""
    users = np.asarray(user_ids)
    zero = Decimal(0)
    return np.fromiter(
        (would_exceed(spent.get(int(u), zero), epsilon, cap) for u in users),
        dtype=bool,
        count=len(users),
    )


def over_cap(charge: Charge, spent: Mapping[int, Decimal], cap: Decimal) -> list[int]:
    """The users of ``charge`` it would push past ``cap``."""
    zero = Decimal(0)
    return [u for u in charge.users if would_exceed(spent.get(u, zero), charge.epsilon, cap)]


class Verdict(enum.Enum):
    """What a query commit did: ``OK``, or why it wrote nothing."""

    OK = "ok"
    STALE = "stale"  # the dataset's epoch moved on since the look-up
    MISSING = "missing"  # some budget accounts do not exist yet
    TWIN = "twin"  # the same query was stored meanwhile (served, not charged)
    EXHAUSTED = "exhausted"  # a user would pass the cap
    QUOTA = "quota"  # the key would pass its quota


@dataclass(frozen=True)
class Quota:
    """An API key's epsilon quota and what it has spent."""

    limit: Decimal
    spent: Decimal


def query_verdict(
    charge: Charge,
    *,
    epoch_now: int,
    accounts: Mapping[int, Decimal],
    cap: Decimal,
    twin: bool,
    quota: Quota | None,
) -> Verdict:
    """The decision of a query commit, from what it read under its locks.

    Order: epoch, accounts present, twin answer, users' caps, key quota.
    ``accounts`` maps each charged user that has an account to its spend.
    """
    if epoch_now != charge.epoch:
        return Verdict.STALE
    if any(u not in accounts for u in charge.users):
        return Verdict.MISSING
    if twin:
        return Verdict.TWIN
    if over_cap(charge, accounts, cap):
        return Verdict.EXHAUSTED
    if quota is not None and would_exceed(quota.spent, charge.epsilon, quota.limit):
        return Verdict.QUOTA
    return Verdict.OK
