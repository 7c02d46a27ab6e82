"""The ledger's set-based cap test against the one-account rule of ``app.budget``,
account by account (brute force), edges included: a spend at the cap, one quantum
below or above it, the clamp, costs of many grids."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import numpy as np

from app import budget
from app.ledger.accounts import USER_BITS, Accounts, window_users

Q = budget.QUANTUM


def _cases(seed: int) -> tuple[list[Decimal], list[int], list[Decimal], Decimal]:
    rng = np.random.default_rng(seed)
    cap = budget.limit(Decimal(str(rng.choice([1, 0.3, 7.5, 1e6]))))
    eps = [budget.charged(Decimal(str(e))) for e in (0.1, 1e-6, 0.3333333333333, 2.5, 1e6)]
    spent = [
        Decimal(0), cap, cap - Q, cap + Q, cap / 2, budget.SPENT_CLAMP, cap - eps[0],
        *(budget.limit(Decimal(str(x))) for x in rng.uniform(0, float(cap), 40)),
    ]  # fmt: skip
    grids = [1, 2, 3, 7, 10**6]
    return spent, grids, eps, cap


def test_the_set_cap_test_is_the_one_account_rule() -> None:
    for seed in range(6):
        spent, grids, eps_list, cap = _cases(seed)
        for eps in eps_list:
            s = np.array([budget.quanta(x) for x in spent for _ in grids], dtype=np.int64)
            k = np.array([g for _ in spent for g in grids], dtype=np.int64)
            got = budget.over_cap_counts(s, k, eps, cap)
            want = [budget.would_exceed(x, eps * g, cap) for x in spent for g in grids]
            assert got.tolist() == want


def test_the_largest_part_is_per_part_of_each_account() -> None:
    for seed in range(6):
        spent, grids, _, cap = _cases(seed)
        for g in grids:
            left = [budget.remaining(x, cap) for x in spent]
            want = min(budget.per_part(r, g) for r in left)
            got = budget.largest_part(
                np.array([budget.quanta(r) for r in left], dtype=np.int64),
                np.full(len(left), g, dtype=np.int64),
            )
            assert got == want


def test_accounts_read_missing_subjects_as_nothing_spent() -> None:
    windows = (date(2024, 3, 1), date(2024, 3, 2))
    subjects = np.array([3, 9, (1 << USER_BITS) | 3], dtype=np.int64)
    acc = Accounts(1, 1, Decimal(1), windows, subjects, np.array([5, 7, 11], dtype=np.int64))
    asked = np.array([9, 4, (1 << USER_BITS) | 3, (1 << USER_BITS) | 99], dtype=np.int64)
    assert acc.spent_of(asked).tolist() == [7, 0, 11, 0]
    assert window_users(subjects, 1).tolist() == [3]
    empty = Accounts(1, 1, Decimal(1), windows, subjects[:0], subjects[:0])
    assert empty.spent_of(asked).tolist() == [0, 0, 0, 0]
    full = budget.quanta(Decimal(1))
    paid = Accounts(1, 1, Decimal(1), windows, subjects, np.array([full, 0, full - 1], np.int64))
    over = paid.over_cap(subjects, np.ones(3, dtype=np.int64), Decimal("1e-12"))
    assert over.tolist() == [3]


def test_the_sql_reads_spends_with_the_same_clamp_and_quantum() -> None:
    from app.ledger import repository

    assert budget.SPENT_CLAMP == 2_000_000 and budget.EPSILON_SCALE == 12
    assert "LEAST(spent, 2000000) * 1e12" in repository._ACCOUNTS
