"""All SQL of the privacy-budget ledger. Lock order: the dataset row, then the windows where
accounts are created (ascending), then budget accounts by ascending (window, user id), then the
key row; modes and epochs as in docs/math.md §10.5–§10.6. Nothing here commits
(``app.db.unit``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import date
from decimal import Decimal
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from psycopg.errors import LockNotAvailable
from sqlalchemy import (
    CursorResult,
    Integer,
    any_,
    bindparam,
    distinct,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import OperationalError

from app.budget import Budget
from app.datasets.models import Dataset, DatasetUser
from app.db.base import Repository
from app.db.unit import binary_rows, driver_connection, int_array
from app.keys.models import ApiKey
from app.ledger.models import BudgetAccount, BudgetReset, LedgerEntry

Int64s = npt.NDArray[np.int64]


#: The spends as quanta, clamped at ``app.budget.SPENT_CLAMP`` (2e6, 1e12 quanta each).
_ACCOUNTS = (
    "SELECT string_agg(int4send(user_id), ''::bytea ORDER BY user_id), "
    "string_agg(int8send((LEAST(spent, 2000000) * 1e12)::bigint), ''::bytea ORDER BY user_id) "
    "FROM (SELECT user_id, spent FROM budget_accounts WHERE dataset_id = %s AND epoch = %s "
    "AND window_start = %s AND user_id = ANY(%s::integer[]) ORDER BY user_id {lock}) AS a"
)
#: One advisory lock per (dataset, window), taken in the order given: whoever creates accounts
#: in a window holds it to its commit (docs/math.md §10.6).
_LOCK_WINDOWS = (
    "SELECT pg_advisory_xact_lock(k) FROM "
    "(SELECT k FROM unnest(%s::bigint[]) WITH ORDINALITY AS w(k, i) ORDER BY i) AS w"
)
#: Inserts hold the dataset's row (``FOR KEY SHARE``, as a foreign key's check would): a deleted
#: dataset gets no accounts (its trigger deletes those it had; docs/math.md §10.6).
_INSERT_ACCOUNTS = (
    "INSERT INTO budget_accounts (dataset_id, epoch, window_start, user_id, spent) "
    "SELECT d.id, %s, %s, t.u, 0 FROM (SELECT id FROM datasets WHERE id = %s FOR KEY SHARE) d, "
    "unnest(%s::integer[]) WITH ORDINALITY AS t(u, i) ORDER BY t.i ON CONFLICT DO NOTHING"
)
#: New accounts with their first charge; ``spent`` is what ``_CHARGE_COUNTS`` would make of 0.
_INSERT_CHARGED = (
    "INSERT INTO budget_accounts (dataset_id, epoch, window_start, user_id, spent) "
    "SELECT d.id, %(epoch)s, %(window)s, c.u, %(eps)s * c.k "
    "FROM (SELECT id FROM datasets WHERE id = %(dataset)s FOR KEY SHARE) d, "
    "unnest(%(users)s::integer[], %(grids)s::integer[]) AS c(u, k) "
    "WHERE %(eps)s * c.k <= %(cap)s"
)
_CHARGE_COUNTS = (
    "UPDATE budget_accounts AS a SET spent = a.spent + %(eps)s * c.k "
    "FROM unnest(%(users)s::integer[], %(grids)s::integer[]) AS c(u, k) "
    "WHERE a.dataset_id = %(dataset)s AND a.epoch = %(epoch)s AND a.window_start = %(window)s "
    "AND a.user_id = c.u AND a.spent + %(eps)s * c.k <= %(cap)s"
)


def window_lock_key(dataset_id: int, window: date) -> int:
    """The advisory lock key of one dataset's budget window (distinct for every pair: dataset
    ids are 31-bit, a date's ordinal 22-bit)."""
    return dataset_id << 32 | window.toordinal()


def _users_in(user_ids: Iterable[int]) -> Any:
    """``user_id = ANY(:users)``: one array parameter (an ``IN`` list of 10⁵ values costs
    seconds)."""
    users = bindparam("users", [int(u) for u in user_ids], type_=ARRAY(Integer))
    return BudgetAccount.user_id == any_(users)


_ANALYZE_LOCK = "LOCK TABLE budget_accounts IN SHARE UPDATE EXCLUSIVE MODE NOWAIT"
#: ANALYZE once the accounts grew by more than this (autovacuum's default threshold).
ANALYZE_MIN_ROWS, ANALYZE_FRACTION = 50, 0.1


def needs_analyze(known: float, added: int) -> bool:
    """Whether ``budget_accounts`` needs statistics: never analyzed (``reltuples`` -1) or ``added``
    rows are many next to ``known``."""
    return known < 0 or added > ANALYZE_MIN_ROWS + ANALYZE_FRACTION * known


def _in_window(dataset_id: int, epoch: int, window: date) -> tuple[Any, ...]:
    """The accounts of one dataset, epoch and budget window (a primary-key prefix)."""
    return (
        BudgetAccount.dataset_id == dataset_id,
        BudgetAccount.epoch == epoch,
        BudgetAccount.window_start == window,
    )


class LedgerRepository(Repository):
    def limit_lock_waits(self, seconds: float) -> None:
        """Row-lock waits of this transaction fail after ``seconds`` (``lock_timeout``)."""
        ms = max(1, round(seconds * 1000))
        self.session.execute(text(f"SET LOCAL lock_timeout = {ms}"))

    def spent(
        self, dataset_id: int, epoch: int, user_ids: Sequence[int], *, window: date
    ) -> dict[int, Decimal]:
        """What each of ``user_ids`` has spent in one window (0 without an account); no lock."""
        out = dict.fromkeys((int(u) for u in user_ids), Decimal(0))
        rows = self.session.execute(
            select(BudgetAccount.user_id, BudgetAccount.spent).where(
                *_in_window(dataset_id, epoch, window), _users_in(out)
            )
        )
        out.update({u: s for u, s in rows})
        return out

    def lock_windows(self, dataset_id: int, windows: Sequence[date]) -> None:
        """Hold the right to create accounts in ``windows`` (in this order) until commit."""
        keys = [window_lock_key(dataset_id, w) for w in windows]
        if not keys:
            return
        with driver_connection(self.session).cursor() as cursor:
            cursor.execute(_LOCK_WINDOWS, (int_array(keys),))

    def insert_accounts(
        self, dataset_id: int, epoch: int, user_ids: npt.ArrayLike, *, window: date
    ) -> int:
        """Zero accounts for ``user_ids`` (ascending) where missing; how many."""
        params = (epoch, window, dataset_id, int_array(np.asarray(user_ids, dtype=np.int64)))
        with driver_connection(self.session).cursor() as cursor:
            cursor.execute(_INSERT_ACCOUNTS, params)
            return int(cursor.rowcount)

    def analyze_after_growth(self, added: int) -> None:
        """ANALYZE ``budget_accounts`` after it grew a lot: without statistics the planner scans a
        dataset's accounts instead of probing the primary key."""
        known = self.session.execute(
            text("SELECT reltuples FROM pg_class WHERE oid = 'budget_accounts'::regclass")
        ).scalar_one()
        if not needs_analyze(known, added):
            return
        # Two ANALYZEs of one table wait for each other to commit: skip it while another
        # transaction (a release of any dataset) holds that right; it refreshes the statistics.
        try:
            with self.session.begin_nested():
                self.session.execute(text(_ANALYZE_LOCK))
                self.session.execute(text("ANALYZE budget_accounts"))
        except OperationalError as exc:
            if not isinstance(exc.orig, LockNotAvailable):
                raise

    def key_quota(self, key_id: int) -> Budget | None:
        """The key's quota and what it spent of it (None: a key without a quota)."""
        row = self.session.execute(
            select(ApiKey.epsilon_quota, ApiKey.epsilon_spent).where(ApiKey.id == key_id)
        ).first()
        return None if row is None or row[0] is None else Budget(cap=row[0], spent=row[1])

    def spend_quota(self, key_id: int, epsilon: Decimal) -> bool:
        """Add ``epsilon`` to the key's spend unless it passes the quota (atomic)."""
        result = self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id)
            .where(
                or_(
                    ApiKey.epsilon_quota.is_(None),
                    ApiKey.epsilon_spent + epsilon <= ApiKey.epsilon_quota,
                )
            )
            .values(epsilon_spent=ApiKey.epsilon_spent + epsilon)
            .execution_options(synchronize_session=False)
        )
        return cast("CursorResult[Any]", result).rowcount == 1

    def key_spent(self, key_id: int) -> Decimal:
        """What a key without a quota spent: each query's epsilon plus each release's largest charge
        to one user."""
        queries = self.session.scalar(
            select(func.sum(LedgerEntry.epsilon)).where(
                LedgerEntry.key_id == key_id, LedgerEntry.kind == "query"
            )
        )
        per_user: defaultdict[tuple[int, int], Decimal] = defaultdict(Decimal)
        rows = self.session.execute(
            select(LedgerEntry.reference_id, LedgerEntry.epsilon, LedgerEntry.users).where(
                LedgerEntry.key_id == key_id, LedgerEntry.kind == "release"
            )
        )
        for release, epsilon, users in rows:
            for user in users:
                per_user[(release, user)] += epsilon
        largest: defaultdict[int, Decimal] = defaultdict(Decimal)
        for (release, _), cost in per_user.items():
            largest[release] = max(largest[release], cost)
        return Decimal(queries or 0) + sum(largest.values(), Decimal(0))

    def account_arrays(
        self, dataset_id: int, epoch: int, users: Int64s, *, window: date, lock: bool
    ) -> tuple[Int64s, Int64s]:
        """``(users, spent in quanta)`` of ``users``' accounts in the window, ascending, locked in
        that order with ``lock``."""
        query = _ACCOUNTS.format(lock="FOR UPDATE" if lock else "")
        rows = binary_rows(self.session, query, (dataset_id, epoch, window, int_array(users)))
        ids, spent = rows[0]
        return (
            np.frombuffer(ids or b"", dtype=">i4").astype(np.int64),
            np.frombuffer(spent or b"", dtype=">i8").astype(np.int64),
        )

    def charge_counts(
        self,
        dataset_id: int,
        epoch: int,
        users: Int64s,
        grids: Int64s,
        epsilon: Decimal,
        cap: Decimal,
        *,
        window: date,
        new: bool = False,
    ) -> int:
        """Add ``grids[i] × epsilon`` to each ``users[i]``'s locked account unless that passes
        ``cap``; ``new``: the users have no account yet (the window's creation lock held), each
        is made with that charge. The rows changed or made."""
        params = {
            "dataset": dataset_id, "epoch": epoch, "window": window, "eps": epsilon, "cap": cap,
            "users": int_array(users), "grids": int_array(grids),
        }  # fmt: skip
        with driver_connection(self.session).cursor() as cursor:
            cursor.execute(_INSERT_CHARGED if new else _CHARGE_COUNTS, params)
            return int(cursor.rowcount)

    def add_entries(self, entries: list[dict[str, Any]]) -> None:
        """Append ledger entries (the columns of :class:`LedgerEntry`), one statement."""
        if entries:
            self.session.execute(insert(LedgerEntry), entries)

    def summary(
        self, dataset_id: int, epoch: int, cap: Decimal, *, window: date
    ) -> tuple[Decimal, int]:
        """``(max_spent, users_at_cap)`` for one epoch and window."""
        base = _in_window(dataset_id, epoch, window)
        max_spent = self.session.scalar(select(func.max(BudgetAccount.spent)).where(*base))
        at_cap = self.session.scalar(
            select(func.count()).select_from(BudgetAccount).where(*base, BudgetAccount.spent >= cap)
        )
        return (max_spent or Decimal(0)), int(at_cap or 0)

    def users_at_cap(self) -> list[tuple[int, int]]:
        """``(dataset id, users at the cap)`` in each current epoch (a metric)."""
        at_cap = func.count(distinct(BudgetAccount.user_id)).filter(
            BudgetAccount.spent >= Dataset.budget_per_user
        )
        rows = self.session.execute(
            select(Dataset.id, at_cap)
            .outerjoin(
                BudgetAccount,
                (BudgetAccount.dataset_id == Dataset.id) & (BudgetAccount.epoch == Dataset.epoch),
            )
            .group_by(Dataset.id)
            .order_by(Dataset.id)
        )
        return [(int(d), int(n)) for d, n in rows]

    def accounts(
        self, dataset_id: int, epoch: int, *, window: date, limit: int, offset: int
    ) -> list[tuple[str, Decimal]]:
        rows = self.session.execute(
            select(DatasetUser.user_hash, BudgetAccount.spent)
            .join(DatasetUser, DatasetUser.id == BudgetAccount.user_id)
            .where(*_in_window(dataset_id, epoch, window))
            .order_by(BudgetAccount.spent.desc(), DatasetUser.user_hash)
            .limit(limit)
            .offset(offset)
        )
        return [(h, s) for h, s in rows]

    def count_accounts(self, dataset_id: int, epoch: int, *, window: date) -> int:
        return int(
            self.session.scalar(
                select(func.count())
                .select_from(BudgetAccount)
                .where(*_in_window(dataset_id, epoch, window))
            )
            or 0
        )

    def most_spent_window(self, dataset_id: int, epoch: int) -> date | None:
        """The epoch's window where some user spent the most (latest of ties), or None."""
        return self.session.scalar(
            select(BudgetAccount.window_start)
            .where(BudgetAccount.dataset_id == dataset_id, BudgetAccount.epoch == epoch)
            .where(BudgetAccount.spent > 0)
            .order_by(BudgetAccount.spent.desc(), BudgetAccount.window_start.desc())
            .limit(1)
        )

    def open_epoch(self, dataset_id: int, from_epoch: int, key_id: int, reason: str) -> int:
        """Move the (exclusively locked) dataset to a new epoch and audit it."""
        to_epoch = from_epoch + 1
        self.session.execute(
            update(Dataset)
            .where(Dataset.id == dataset_id)
            .values(epoch=to_epoch)
            .execution_options(synchronize_session=False)
        )
        self.session.add(
            BudgetReset(
                dataset_id=dataset_id,
                from_epoch=from_epoch,
                to_epoch=to_epoch,
                key_id=key_id,
                reason=reason,
            )
        )
        self.session.flush()
        return to_epoch
