"""Budget services (docs/math.md §10, API.md "Guarantees"): who is charged, who is exhausted.

The rule is ``app.ledger.rule``'s; the query writes are ``app.ledger.committer``'s."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal

import numpy as np
import numpy.typing as npt
from psycopg.errors import LockNotAvailable
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app import budget
from app.datasets.models import Dataset
from app.datasets.repository import DatasetRepository
from app.keys.models import ApiKey
from app.keys.service import KeyIdentity
from app.kit.errors import BudgetExhausted, Conflict, InvalidRequest, NotFound
from app.ledger import rule
from app.ledger.accounts import USER_BITS, USER_MASK, Accounts, Int64s, window_users
from app.ledger.repository import LedgerRepository
from app.time.budget_windows import (
    ALL_TIME,
    local_today,
    parse_window,
    privacy_unit,
    window_json,
    window_start,
)


def lock_dataset(session: Session, dataset_id: int, *, exclusive: bool = False) -> Dataset:
    """The dataset with its row locked: shared by queries and releases, exclusive (among resets and
    uploads) by a budget reset, which does not wait for the shared lockers (docs/math.md §10.5)."""
    dataset = DatasetRepository(session).lock(dataset_id, shared=not exclusive)
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} not found")
    return dataset


#: How long a budget reset waits for an upload of the same dataset (the one request that
#: holds the row's lock for long) before it answers 409.
RESET_WAIT_SECONDS = 5.0


def lock_for_reset(session: Session, dataset_id: int) -> Dataset:
    """The dataset locked for a reset, waiting at most ``RESET_WAIT_SECONDS`` (then 409)."""
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


def lock_accounts(
    session: Session,
    dataset: Dataset,
    epoch: int,
    windows: tuple[date, ...],
    subjects: Int64s,
    *,
    known: Accounts | None = None,
) -> Accounts:
    """Lock the accounts of ``subjects`` for this transaction: first the right to create accounts
    in the windows where some may be missing (ascending), then the accounts there are (windows,
    then users, ascending: the lock order). Those missing stay missing until this transaction's
    charge creates them with their charge (:func:`charge_accounts`; docs/math.md §10.6): nothing
    is created before. ``known``: the same subjects' accounts as read earlier in this epoch, each
    of which exists still (an epoch's accounts are never deleted), so only windows with others
    are locked."""
    repo = LedgerRepository(session)
    users = [window_users(subjects, i) for i in range(len(windows))]
    if known is not None and (known.epoch, known.windows) == (epoch, windows):
        was_found = _members(subjects, known.subjects)
    else:
        was_found = np.zeros(subjects.size, dtype=bool)
    unknown_windows = np.unique(subjects[~was_found] >> USER_BITS)
    repo.lock_windows(dataset.id, [windows[i] for i in unknown_windows.tolist()])
    locked = _accounts(repo, dataset, epoch, windows, users, lock=True)
    found = _members(subjects, locked.subjects)
    if (was_found & ~found).any():
        raise RuntimeError("budget accounts vanished while locking them")
    if found.all():
        return locked
    spent = np.zeros(subjects.size, dtype=np.int64)
    spent[found] = locked.spent  # both ascending
    return replace(locked, subjects=subjects, spent=spent, absent=subjects[~found])


def read_accounts(
    session: Session, dataset: Dataset, epoch: int, windows: tuple[date, ...], subjects: Int64s
) -> Accounts:
    """The accounts of ``subjects`` as the ledger reads now, without locks (a preview)."""
    users = [window_users(subjects, i) for i in range(len(windows))]
    return _accounts(LedgerRepository(session), dataset, epoch, windows, users, lock=False)


def _accounts(
    repo: LedgerRepository,
    dataset: Dataset,
    epoch: int,
    windows: tuple[date, ...],
    users: list[Int64s],
    *,
    lock: bool,
) -> Accounts:
    subjects, spent = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
    for i, w in enumerate(windows):
        if not users[i].size:
            continue
        ids, quanta = repo.account_arrays(dataset.id, epoch, users[i], window=w, lock=lock)
        subjects.append((i << USER_BITS) | ids)
        spent.append(quanta)
    return Accounts(
        dataset.id, epoch, dataset.budget_per_user, windows,
        np.concatenate(subjects), np.concatenate(spent),
    )  # fmt: skip


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
    """Bool per user: would ``epsilon`` more pass the cap in ``window``, read without a lock (spend
    only grows within an epoch; the charge re-checks under lock)."""
    users = [int(u) for u in np.asarray(user_ids)]
    spent = LedgerRepository(session).spent(dataset_id, epoch, users, window=window)
    return budget.exhausted(spent, users, epsilon, cap)


def create_accounts(
    session: Session, dataset_id: int, epoch: int, user_ids: Iterable[int], *, window: date
) -> None:
    """Create the missing accounts of ``user_ids`` in ``window``, ascending, holding the window's
    creation lock to commit."""
    repo = LedgerRepository(session)
    repo.lock_windows(dataset_id, [window])
    added = repo.insert_accounts(
        dataset_id, epoch, np.unique(np.fromiter(user_ids, dtype=np.int64)), window=window
    )
    if added:
        repo.analyze_after_growth(added)


def charge_accounts(
    session: Session,
    accounts: Accounts,
    subjects: Int64s,
    grids: Int64s,
    epsilon: Decimal,
    *,
    key_id: int,
    reference_id: int,
) -> None:
    """Charge ``grids[i] × epsilon`` to each of ``subjects[i]`` (locked in ``accounts``) for a
    release: per window one ``UPDATE`` of the accounts there are and one ``INSERT`` of the absent
    ones with their charge, then one ``INSERT`` of ledger entries. The caller's plan already left
    out users who cannot pay, so a refusal here is a bug."""
    if accounts.over_cap(subjects, grids, epsilon).size:
        raise rule.refusal(rule.Verdict.EXHAUSTED, scope="this charge", over=None)
    repo = LedgerRepository(session)
    entries: list[dict[str, object]] = []
    window_index = subjects >> USER_BITS
    absent = accounts.absent
    new = _members(subjects, absent)
    added = 0
    for i, window in enumerate(accounts.windows):
        here = window_index == i
        users, counts = subjects[here] & USER_MASK, grids[here]
        if not users.size:
            continue
        fresh = new[here]
        args = (accounts.dataset_id, accounts.epoch)
        changed = repo.charge_counts(
            *args, users[~fresh], counts[~fresh], epsilon, accounts.cap, window=window
        ) if not fresh.all() else 0  # fmt: skip
        made = repo.charge_counts(
            *args, users[fresh], counts[fresh], epsilon, accounts.cap, window=window, new=True
        ) if fresh.any() else 0  # fmt: skip
        if changed + made != users.size:
            raise RuntimeError(f"charged {changed + made} accounts, expected {users.size}")
        added += made
        for k in np.unique(counts).tolist():
            charged = users[counts == k].tolist()
            entries.append(
                {
                    "dataset_id": accounts.dataset_id, "epoch": accounts.epoch,
                    "window_start": window, "key_id": key_id, "kind": "release",
                    "reference_id": reference_id, "grid_id": None, "epsilon": epsilon * k,
                    "n_users": len(charged), "users": charged,
                }
            )  # fmt: skip
    repo.add_entries(entries)
    if added:  # statistics once for all the windows
        repo.analyze_after_growth(added)


def _members(subjects: Int64s, ascending: Int64s) -> np.ndarray:
    """``np.isin(subjects, ascending)`` by binary search in the ascending array (a month's
    release: 10⁶ subjects in 10⁶ absent ones, no hash table or sort of both)."""
    if not ascending.size:
        return np.zeros(subjects.size, dtype=bool)
    at = np.minimum(np.searchsorted(ascending, subjects), ascending.size - 1)
    found: np.ndarray = ascending[at] == subjects
    return found


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
    """The window budget and ledger answers describe: the one asked for, else the one where some
    user spent the most (latest of ties), else today's; :data:`ALL_TIME` without windows."""
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
    """Open a new epoch (every window at once), audited; requests in flight finish in the epoch they
    read (docs/math.md §10.5)."""
    epoch = lock_for_reset(session, dataset.id).epoch
    return LedgerRepository(session).open_epoch(dataset.id, epoch, key_id, reason)


def key_spent(session: Session, key: ApiKey) -> Decimal:
    """What ``key`` spent: its quota's tally, or what the ledger holds, counted as a quota would."""
    if key.epsilon_quota is not None:
        return key.epsilon_spent
    return LedgerRepository(session).key_spent(key.id)


def quota_left(session: Session, key_id: int) -> Decimal | None:
    """What is left of the key's quota (``None``: no quota)."""
    quota = LedgerRepository(session).key_quota(key_id)
    return None if quota is None else quota.remaining


def spend_quota(session: Session, key: KeyIdentity, epsilon: Decimal) -> None:
    """Charge ``epsilon`` against the key's quota atomically, or refuse (a release; queries spend it
    in their commit). Keys without a quota are not touched."""
    if key.has_quota and not LedgerRepository(session).spend_quota(key.id, budget.charged(epsilon)):
        raise _quota_refusal(session, key)


def check_quota(session: Session, key: KeyIdentity, epsilon: Decimal) -> None:
    """Refuse as :func:`spend_quota` would, without charging (before accounts are created)."""
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
