"""Budget services (docs/math.md §10, API.md "Guarantees"): who is charged, who is exhausted.

A query at ``eps`` charges ``eps`` to every user with kept records. It is
answered only if no charged user would pass ``budget_per_user``; with
``on_exhausted = exclude`` the exhausted users are left out instead. Which users
are exhausted depends only on the ledger, never on values. The rule itself is
``app.ledger.rule``; the writes are ``app.ledger.committer``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

import numpy as np
import numpy.typing as npt
from psycopg.errors import LockNotAvailable
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app import budget
from app.datasets.models import Dataset
from app.db.unit import separate_transaction
from app.keys.models import ApiKey
from app.keys.service import KeyIdentity
from app.kit.errors import BudgetExhausted, Conflict, InvalidRequest, NotFound
from app.ledger import rule
from app.ledger.committer import apply_charge
from app.ledger.repository import LedgerRepository
from app.time.budget_windows import (
    ALL_TIME,
    local_today,
    parse_window,
    privacy_unit,
    window_json,
    window_start,
)


@dataclass
class LockedBudget:
    """The locked accounts of some users of one dataset, epoch and budget window
    (docs/math.md §10.4), for this transaction.

    ``spent`` is kept up to date as charges are made, so several charges in one
    transaction (a release charges every grid of a timeslot) are checked
    cumulatively against the cap.
    """

    dataset_id: int
    epoch: int
    window: date
    cap: Decimal
    spent: dict[int, Decimal]

    def exhausted(self, user_ids: npt.ArrayLike, epsilon: Decimal) -> npt.NDArray[np.bool_]:
        """Bool per user: would ``epsilon`` more pass the cap? (ledger only, never values)"""
        return budget.exhausted(self.spent, user_ids, epsilon, self.cap)


def lock_dataset(session: Session, dataset_id: int, *, exclusive: bool = False) -> Dataset:
    """The dataset with its row locked: shared by queries and releases, exclusive (among
    resets and uploads) by a budget reset.

    A reset does not wait for the shared lockers: a transaction's charges are made in
    the ``epoch`` it read here, even if a reset commits meanwhile (docs/math.md §10.5).
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
    session: Session, dataset: Dataset, epoch: int, user_ids: npt.ArrayLike, *, window: date
) -> LockedBudget:
    """Lock every account of ``user_ids`` in ``window`` (ascending id order) for this
    transaction (:func:`lock_budgets` for one window)."""
    return lock_budgets(session, dataset, epoch, {window: user_ids})[window]


def lock_budgets(
    session: Session, dataset: Dataset, epoch: int, users_by_window: Mapping[date, npt.ArrayLike]
) -> dict[date, LockedBudget]:
    """Lock the accounts of each window's users for this transaction, windows ascending
    and users ascending within each (the lock order everywhere), creating the missing
    ones first in a transaction of their own, so this one never holds an insert lock
    outside the ascending order — the one way two charges over overlapping users could
    deadlock. One :class:`LockedBudget` per window."""
    wanted = {w: [int(u) for u in np.asarray(users_by_window[w])] for w in sorted(users_by_window)}
    repo = LedgerRepository(session)
    missing = [
        w
        for w, users in wanted.items()
        if repo.missing_accounts(dataset.id, epoch, users, window=w)
    ]
    if missing:
        with separate_transaction(session) as own:
            for w in missing:
                create_accounts(own, dataset.id, epoch, wanted[w], window=w)
    out: dict[date, LockedBudget] = {}
    for w, users in wanted.items():
        spent = repo.lock_accounts(dataset.id, epoch, users, window=w)
        if len(spent) != len(set(users)):
            raise RuntimeError("budget accounts vanished while locking them")
        out[w] = LockedBudget(dataset.id, epoch, w, dataset.budget_per_user, spent)
    return out


def exhausted_now(
    session: Session,
    dataset_id: int,
    epoch: int,
    cap: Decimal,
    user_ids: npt.ArrayLike,
    epsilon: Decimal,
    *,
    window: date,
) -> npt.NDArray[np.bool_]:
    """Bool per user: would ``epsilon`` more pass the cap in ``window``, as the ledger
    reads now (no lock: spend only grows within an epoch, so a user found exhausted stays
    so, and the charge itself re-checks the others under lock)."""
    users = [int(u) for u in np.asarray(user_ids)]
    spent = LedgerRepository(session).spent(dataset_id, epoch, users, window=window)
    return budget.exhausted(spent, users, epsilon, cap)


def create_accounts(
    session: Session, dataset_id: int, epoch: int, user_ids: Iterable[int], *, window: date
) -> None:
    """Create the missing budget accounts of ``user_ids`` in ``window`` in ``session``'s
    transaction (a unit of its own: a grid's first query, or :func:`lock_budgets`' side
    transaction)."""
    repo = LedgerRepository(session)
    missing = repo.missing_accounts(dataset_id, epoch, [int(u) for u in user_ids], window=window)
    if missing:
        repo.insert_accounts(dataset_id, epoch, missing, window=window)
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
    """Charge ``epsilon`` to each of ``user_ids`` (locked in ``budget``, in its window),
    or refuse.

    Raises ``BudgetExhausted`` (:func:`app.ledger.rule.refusal`) unless
    :func:`app.ledger.rule.charge_verdict` says ``OK``; the caller's plan has already
    left out, or refused for, users who cannot pay.
    """
    event = rule.Charge.of(
        budget.dataset_id, budget.epoch, user_ids, epsilon, window=budget.window,
        key_id=key_id, kind=kind, grid_id=grid_id,
    )  # fmt: skip
    verdict = rule.charge_verdict(
        event, epoch_now=budget.epoch, accounts=budget.spent, cap=budget.cap, twin=False,
        quota=None,
    )  # fmt: skip
    if verdict is not rule.Verdict.OK:  # the plan checked the caps: a bug if reached
        raise rule.refusal(verdict, scope="this charge", over=None)
    apply_charge(session, event, reference_id=reference_id)
    for u in event.users:
        budget.spent[u] += epsilon


def parse_window_param(dataset: Dataset, text: str | None) -> date | None:
    """The ``window`` query parameter as the window it names, or ``InvalidRequest``."""
    if text is None:
        return None
    try:
        return parse_window(dataset, text)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


def shown_window(
    session: Session, dataset: Dataset, epoch: int, window: date | None, now: datetime | None = None
) -> date:
    """The window the budget and ledger answers describe: the one asked for; without
    one, for a dataset with windows, the window where some user spent the most in the
    epoch (the latest of ties: the one nearest exhaustion), or today's local window
    when nobody was charged; :data:`ALL_TIME` for a dataset without windows."""
    if dataset.budget_window == "none":
        return ALL_TIME
    if window is not None:
        return window
    found = LedgerRepository(session).most_spent_window(dataset.id, epoch)
    if found is not None:
        return found
    today = local_today(dataset, now or datetime.now(UTC))
    return window_start(dataset.budget_window, today)


def _window_fields(dataset: Dataset, window: date) -> dict[str, object]:
    return {
        "window": window_json(dataset, window),
        "budget_window": dataset.budget_window,
        "privacy_unit": privacy_unit(dataset),
    }


def budget_summary(
    session: Session, dataset: Dataset, *, window: date | None = None
) -> dict[str, object]:
    repo = LedgerRepository(session)
    epoch = dataset.epoch
    shown = shown_window(session, dataset, epoch, window)
    max_spent, at_cap = repo.summary(dataset.id, epoch, dataset.budget_per_user, window=shown)
    return {
        "budget_per_user": float(dataset.budget_per_user),
        "max_spent": float(max_spent),
        "users_at_cap": at_cap,
        "epoch": epoch,
        "users_charged": repo.count_accounts(dataset.id, epoch, window=shown),
        **_window_fields(dataset, shown),
    }


def ledger_page(
    session: Session,
    dataset: Dataset,
    *,
    epoch: int | None,
    window: date | None = None,
    limit: int,
    offset: int,
) -> dict[str, object]:
    repo = LedgerRepository(session)
    epoch = dataset.epoch if epoch is None else epoch
    shown = shown_window(session, dataset, epoch, window)
    rows = repo.accounts(dataset.id, epoch, window=shown, limit=limit, offset=offset)
    return {
        "epoch": epoch,
        **_window_fields(dataset, shown),
        "total": repo.count_accounts(dataset.id, epoch, window=shown),
        "users": [{"user": h, "spent": float(s), "spent_exact": str(s)} for h, s in rows],
    }


def reset_budget(session: Session, dataset: Dataset, *, key_id: int, reason: str) -> int:
    """Open a new epoch (of every window at once); every old entry stays; the reset is
    audited. One ``UPDATE`` of the dataset's epoch: queries and releases in flight
    finish in the epoch they read (docs/math.md §10.5)."""
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
    if key.has_quota and not LedgerRepository(session).spend_quota(key.id, budget.charged(epsilon)):
        raise _quota_refusal(session, key)


def check_quota(session: Session, key: KeyIdentity, epsilon: Decimal) -> None:
    """Refuse as :func:`spend_quota` would, without charging or locking (a release checks
    before it creates budget accounts, so a refusal leaves none behind)."""
    left = quota_left(session, key.id) if key.has_quota else None
    if left is not None and budget.charged(epsilon) > left:
        raise _quota_refusal(session, key)


def _quota_refusal(session: Session, key: KeyIdentity) -> BudgetExhausted:
    left = quota_left(session, key.id) or budget.ZERO
    return rule.refusal(
        rule.Verdict.QUOTA,
        scope="this release",
        key_name=key.name,
        largest_epsilon=budget.float_at_most(left),
        release=True,
    )
