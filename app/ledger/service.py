"""Budget services (docs/math.md §10, API.md "Guarantees"): who is charged, who is exhausted.

A query at ``eps`` charges ``eps`` to every user with kept records. It is
answered only if no charged user would pass ``budget_per_user``; with
``on_exhausted = exclude`` the exhausted users are left out instead. Which users
are exhausted depends only on the ledger, never on values. The rule itself is
``app.ledger.rule``; the writes are ``app.ledger.committer``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import numpy.typing as npt
from psycopg.errors import LockNotAvailable
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app import budget
from app.datasets.models import Dataset
from app.db.unit import separate_transaction
from app.errors import BudgetExhausted, Conflict, NotFound
from app.keys.models import ApiKey
from app.keys.service import KeyIdentity
from app.ledger import rule
from app.ledger.committer import apply_charge
from app.ledger.repository import LedgerRepository


@dataclass
class LockedBudget:
    """The locked accounts of some users of one dataset and epoch, for this transaction.

    ``spent`` is kept up to date as charges are made, so several charges in one
    transaction (a release charges every grid of a timeslot) are checked
    cumulatively against the cap.
    """

    dataset_id: int
    epoch: int
    cap: Decimal
    spent: dict[int, Decimal]

    def exhausted(self, user_ids: npt.ArrayLike, epsilon: Decimal) -> npt.NDArray[np.bool_]:
        """Bool per user: would ``epsilon`` more pass the cap? (ledger only, never values)"""
        return budget.exhausted(self.spent, user_ids, epsilon, self.cap)


def lock_dataset(session: Session, dataset_id: int, *, exclusive: bool = False) -> Dataset:
    """The dataset with its row locked: shared by queries and releases, exclusive (among
    resets and uploads) by a budget reset.

    A reset does not wait for the shared lockers: a transaction's charges are made in
    the ``epoch`` it read here, even if a reset commits meanwhile (docs/math.md §10.4).
    """
    dataset = LedgerRepository(session).lock_dataset(dataset_id, exclusive=exclusive)
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} not found")
    return dataset


#: How long a budget reset waits for an upload of the same dataset (the one request that
#: holds the row's lock for long) before it answers 409.
RESET_WAIT_SECONDS = 5.0


def lock_for_reset(session: Session, dataset_id: int) -> Dataset:
    """The dataset locked for a budget reset: it waits for nothing but another reset or
    an upload of the same dataset, the latter at most ``RESET_WAIT_SECONDS``."""
    LedgerRepository(session).limit_lock_waits(RESET_WAIT_SECONDS)
    try:
        return lock_dataset(session, dataset_id, exclusive=True)
    except OperationalError as exc:
        if not isinstance(exc.orig, LockNotAvailable):
            raise
        raise Conflict(
            f"dataset {dataset_id} is being written (an upload in progress); retry the "
            "reset when it ends"
        ) from None


def lock_budget(
    session: Session, dataset: Dataset, epoch: int, user_ids: npt.ArrayLike
) -> LockedBudget:
    """Lock every account of ``user_ids`` (ascending id order) for this transaction,
    creating the missing ones first in a transaction of their own, so this
    one never holds an insert lock outside the ascending order — the one way two
    charges over overlapping users could deadlock."""
    users = [int(u) for u in np.asarray(user_ids)]
    repo = LedgerRepository(session)
    if repo.missing_accounts(dataset.id, epoch, users):
        with separate_transaction(session) as own:
            create_accounts(own, dataset.id, epoch, users)
    spent = repo.lock_accounts(dataset.id, epoch, users)
    if len(spent) != len(set(users)):
        raise RuntimeError("budget accounts vanished while locking them")
    return LockedBudget(dataset.id, epoch, dataset.budget_per_user, spent)


def exhausted_now(
    session: Session,
    dataset_id: int,
    epoch: int,
    cap: Decimal,
    user_ids: npt.ArrayLike,
    epsilon: Decimal,
) -> npt.NDArray[np.bool_]:
    """Bool per user: would ``epsilon`` more pass the cap, as the ledger reads now (no
    lock: spend only grows within an epoch, so a user found exhausted stays so, and the
    charge itself re-checks the others under lock)."""
    users = [int(u) for u in np.asarray(user_ids)]
    spent = LedgerRepository(session).spent(dataset_id, epoch, users)
    return budget.exhausted(spent, users, epsilon, cap)


def create_accounts(session: Session, dataset_id: int, epoch: int, user_ids: Iterable[int]) -> None:
    """Create the missing budget accounts of ``user_ids`` in ``session``'s transaction
    (a unit of its own: a grid's first query, or :func:`lock_budget`'s side transaction)."""
    repo = LedgerRepository(session)
    missing = repo.missing_accounts(dataset_id, epoch, [int(u) for u in user_ids])
    if missing:
        repo.insert_accounts(dataset_id, epoch, missing)
        repo.analyze_after_growth(len(missing))


def charge(
    session: Session,
    budget: LockedBudget,
    user_ids: Iterable[int],
    epsilon: Decimal,
    *,
    key_id: int,
    kind: rule.ChargeKind,
    reference_id: int,
    grid_id: int | None,
) -> None:
    """Charge ``epsilon`` to each of ``user_ids`` (locked in ``budget``), or refuse.

    Raises ``BudgetExhausted`` if one of them would pass the cap; the caller has
    already left out exhausted users when the dataset says ``exclude``.
    """
    event = rule.Charge.of(
        budget.dataset_id, budget.epoch, user_ids, epsilon, key_id=key_id, kind=kind,
        grid_id=grid_id,
    )  # fmt: skip
    over = rule.over_cap(event, budget.spent, budget.cap)
    if over:
        raise BudgetExhausted(f"{len(over)} user(s) would pass their privacy budget")
    apply_charge(session, event, reference_id=reference_id)
    for u in event.users:
        budget.spent[u] += epsilon


def budget_summary(session: Session, dataset: Dataset) -> dict[str, object]:
    repo = LedgerRepository(session)
    epoch = dataset.epoch
    max_spent, at_cap = repo.summary(dataset.id, epoch, dataset.budget_per_user)
    return {
        "budget_per_user": float(dataset.budget_per_user),
        "max_spent": float(max_spent),
        "users_at_cap": at_cap,
        "epoch": epoch,
        "users_charged": repo.count_accounts(dataset.id, epoch),
    }


def ledger_page(
    session: Session, dataset: Dataset, *, epoch: int | None, limit: int, offset: int
) -> dict[str, object]:
    repo = LedgerRepository(session)
    epoch = dataset.epoch if epoch is None else epoch
    rows = repo.accounts(dataset.id, epoch, limit=limit, offset=offset)
    return {
        "epoch": epoch,
        "total": repo.count_accounts(dataset.id, epoch),
        "users": [{"user": h, "spent": float(s), "spent_exact": str(s)} for h, s in rows],
    }


def reset_budget(session: Session, dataset: Dataset, *, key_id: int, reason: str) -> int:
    """Open a new epoch; every old entry stays; the reset is audited. One ``UPDATE`` of
    the dataset's epoch: queries and releases in flight finish in the epoch they read
    (docs/math.md §10.4)."""
    epoch = lock_for_reset(session, dataset.id).epoch
    return LedgerRepository(session).open_epoch(dataset.id, epoch, key_id, reason)


def key_spent(session: Session, key: ApiKey) -> Decimal:
    """What ``key`` spent: its quota's tally, or (a key without a quota) what the ledger
    holds, counted as a quota would count it."""
    if key.epsilon_quota is not None:
        return key.epsilon_spent
    return LedgerRepository(session).key_spent(key.id)


def quota_left(session: Session, key_id: int) -> Decimal | None:
    """What is left of the key's quota (``None``: no quota)."""
    quota = LedgerRepository(session).key_quota(key_id)
    return None if quota is None else quota.remaining


def spend_quota(session: Session, key: KeyIdentity, epsilon: Decimal) -> None:
    """Charge ``epsilon`` against the key's quota atomically, or refuse (a release's
    largest cost to one user; queries spend it inside their commit, ``app.ledger.committer``).

    Keys without a quota are not touched: the ledger entries record every key's spend.
    """
    if not key.has_quota:
        return
    repo = LedgerRepository(session)
    if not repo.spend_quota(key.id, budget.charged(epsilon)):
        left = quota_left(session, key.id) or budget.ZERO
        raise BudgetExhausted(
            f"key '{key.name}' would exceed its epsilon quota",
            largest_epsilon=budget.float_at_most(left),
        )
