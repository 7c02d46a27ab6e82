"""Budget rules (docs/math.md §10, API.md "Guarantees"): who is charged, who is exhausted.

A query at ``eps`` charges ``eps`` to every user with kept records. It is
answered only if no charged user would pass ``budget_per_user``; with
``on_exhausted = exclude`` the exhausted users are left out instead. Which users
are exhausted depends only on the ledger, never on values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
from sqlalchemy.orm import Session

from app.datasets.models import Dataset
from app.errors import BudgetExhausted, NotFound
from app.ledger.models import LedgerEntry
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

    def exhausted(self, user_ids: np.ndarray, epsilon: Decimal) -> np.ndarray:
        """Bool per user: would ``epsilon`` more pass the cap? (ledger only, never values)"""
        cap, spent = self.cap, self.spent
        return np.fromiter(
            (spent[int(u)] + epsilon > cap for u in user_ids), dtype=bool, count=len(user_ids)
        )


def lock_dataset(session: Session, dataset_id: int, *, exclusive: bool = False) -> Dataset:
    """The dataset with its row locked: shared by queries, exclusive by a budget reset.

    Its ``epoch`` cannot change until this transaction ends.
    """
    dataset = LedgerRepository(session).lock_dataset(dataset_id, exclusive=exclusive)
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} not found")
    return dataset


def lock_budget(
    session: Session, dataset: Dataset, epoch: int, user_ids: np.ndarray
) -> LockedBudget:
    """Lock every account of ``user_ids`` (ascending id order) for this transaction."""
    spent = LedgerRepository(session).lock_accounts(dataset.id, epoch, [int(u) for u in user_ids])
    return LockedBudget(dataset.id, epoch, dataset.budget_per_user, spent)


def exhausted_now(
    session: Session, dataset_id: int, epoch: int, cap: Decimal, user_ids: np.ndarray, epsilon
) -> np.ndarray:
    """Bool per user: would ``epsilon`` more pass the cap, as the ledger reads now (no
    lock: spend only grows within an epoch, so a user found exhausted stays so, and the
    charge itself re-checks the others under lock)."""
    spent = LedgerRepository(session).spent(dataset_id, epoch, [int(u) for u in user_ids])
    return np.fromiter(
        (spent[int(u)] + epsilon > cap for u in user_ids), dtype=bool, count=len(user_ids)
    )


def ensure_accounts(session: Session, dataset_id: int, epoch: int, user_ids) -> None:
    """Create the missing budget accounts of ``user_ids`` (committed on their own)."""
    LedgerRepository(session).create_accounts(dataset_id, epoch, [int(u) for u in user_ids])


def charge(
    session: Session,
    budget: LockedBudget,
    user_ids: Sequence[int],
    epsilon: Decimal,
    *,
    key_id: int,
    kind: str,
    reference_id: int,
    grid_id: int | None,
) -> None:
    """Charge ``epsilon`` to each of ``user_ids`` (locked in ``budget``), or refuse.

    Raises ``BudgetExhausted`` if one of them would pass the cap; the caller has
    already left out exhausted users when the dataset says ``exclude``.
    """
    users = sorted(int(u) for u in user_ids)
    if not users:  # a data-independent answer (e.g. worst_case_optimal with T = 0) costs nothing
        return
    over = [u for u in users if budget.spent[u] + epsilon > budget.cap]
    if over:
        raise BudgetExhausted(f"{len(over)} user(s) would pass their privacy budget")
    repo = LedgerRepository(session)
    changed = repo.charge(budget.dataset_id, budget.epoch, users, epsilon)
    if changed != len(users):  # accounts were locked above; anything else is a bug
        raise RuntimeError(f"charged {changed} accounts, expected {len(users)}")
    for u in users:
        budget.spent[u] += epsilon
    repo.add_entry(
        LedgerEntry(
            dataset_id=budget.dataset_id,
            epoch=budget.epoch,
            key_id=key_id,
            kind=kind,
            reference_id=reference_id,
            grid_id=grid_id,
            epsilon=epsilon,
            n_users=len(users),
            users=users,
        )
    )


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
    """Open a new epoch; every old entry stays; the reset is audited."""
    epoch = lock_dataset(session, dataset.id, exclusive=True).epoch
    return LedgerRepository(session).open_epoch(dataset.id, epoch, key_id, reason)
