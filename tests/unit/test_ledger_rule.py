"""The ledger's events and the order in which a query commit decides (checked against a
brute-force reading of every combination of its inputs); the amounts and the cap test
are ``app.budget``'s (``test_budget.py``)."""

from __future__ import annotations

import itertools
from decimal import Decimal

import numpy as np
import pytest

from app.budget import Budget, exhausted
from app.ledger.rule import Charge, Verdict, charge_verdict, over_cap
from app.time.budget_windows import ALL_TIME

CAP = Decimal("1.000000000000")


def test_charge_users_are_distinct_and_ascending() -> None:
    charge = Charge.of(
        1, 1, np.array([5, 3, 5, 1]), Decimal("0.1"), window=ALL_TIME, key_id=1, kind="query"
    )
    assert charge.users == (1, 3, 5)
    with pytest.raises(AttributeError):
        charge.epsilon = Decimal(1)  # type: ignore[misc]


def test_exhausted_matches_each_user_checked_alone() -> None:
    rng = np.random.default_rng(7)
    spent = {u: Decimal(int(rng.integers(0, 11))) / 10 for u in range(20)}
    users = np.arange(25)  # 20..24 have no account: nothing spent
    eps = Decimal("0.3")
    got = exhausted(spent, users, eps, CAP)
    want = [spent.get(u, Decimal(0)) + eps > CAP for u in range(25)]
    assert got.tolist() == want
    charge = Charge.of(1, 1, users, eps, window=ALL_TIME, key_id=1, kind="release")
    assert over_cap(charge, spent, CAP) == [u for u in range(25) if want[u]]


def _brute(stale: bool, missing: bool, twin: bool, over: bool, quota_over: bool | None) -> Verdict:
    """The documented order, read off literally: the first condition that holds."""
    for condition, verdict in (
        (stale, Verdict.STALE),
        (missing, Verdict.MISSING),
        (twin, Verdict.TWIN),
        (over, Verdict.EXHAUSTED),
        (bool(quota_over), Verdict.QUOTA),
    ):
        if condition:
            return verdict
    return Verdict.OK


@pytest.mark.parametrize(
    ("stale", "missing", "twin", "over", "quota_over"),
    list(itertools.product([False, True], [False, True], [False, True], [False, True],
                           [None, False, True])),
)  # fmt: skip
def test_charge_verdict_follows_the_documented_order(
    stale: bool, missing: bool, twin: bool, over: bool, quota_over: bool | None
) -> None:
    eps = Decimal("0.25")
    charge = Charge.of(1, 1, [10, 11], eps, window=ALL_TIME, key_id=3, kind="query", grid_id=4)
    accounts = {10: CAP if over else Decimal(0)}
    if not missing:
        accounts[11] = Decimal(0)
    quota = None
    if quota_over is not None:
        quota = Budget(cap=Decimal(1), spent=Decimal(1) if quota_over else Decimal(0))
    got = charge_verdict(
        charge, epoch_now=2 if stale else 1, accounts=accounts, cap=CAP, twin=twin, quota=quota
    )
    assert got is _brute(stale, missing, twin, over, quota_over)


def test_a_charge_of_nobody_is_never_missing_nor_exhausted() -> None:
    charge = Charge.of(1, 1, [], Decimal("0.5"), window=ALL_TIME, key_id=1, kind="query")
    assert charge_verdict(charge, epoch_now=1, accounts={}, cap=CAP, twin=False, quota=None) is (
        Verdict.OK
    )


def test_refusal_is_the_one_budget_error_of_each_refusing_verdict() -> None:
    from app.kit.errors import BudgetExhausted
    from app.ledger.rule import refusal

    quota = refusal(Verdict.QUOTA, scope="this grid", key_name="ana", largest_epsilon=0.25)
    assert isinstance(quota, BudgetExhausted) and quota.largest_epsilon == 0.25
    assert str(quota).startswith("key 'ana' would exceed its epsilon quota; largest_epsilon")
    assert str(refusal(Verdict.EXHAUSTED, scope="these slots", over=3)).startswith(
        "3 user(s) of these slots would pass the privacy budget;"
    )
    assert str(refusal(Verdict.EXHAUSTED, scope="this grid", over=0)).startswith(
        "every user of this grid has exhausted the privacy budget;"
    )
    assert str(refusal(Verdict.EXHAUSTED, scope="this grid")).startswith("a user of this grid")
    for verdict in (Verdict.OK, Verdict.STALE, Verdict.MISSING, Verdict.TWIN):
        with pytest.raises(ValueError, match="not a refusal"):
            refusal(verdict, scope="this grid")
