"""The privacy budget value type (``app.budget``): exact amounts, rounding that always
favours privacy, the cap reachable but never passed, what is left and what fits."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from app import budget
from app.budget import Budget

CAP = Decimal("1.000000000000")
PICO = Decimal("0.000000000001")


def test_the_cap_can_be_reached_but_not_passed_by_one_pico_epsilon() -> None:
    eps = Decimal("0.3")
    assert budget.fits(CAP - eps, eps, CAP) and not budget.would_exceed(CAP - eps, eps, CAP)
    assert budget.would_exceed(CAP - eps + PICO, eps, CAP)
    # floats would get this wrong: 0.1 + 0.2 > 0.3 in binary
    assert budget.fits(Decimal("0.1") + Decimal("0.2"), Decimal(0), Decimal("0.3"))


@pytest.mark.parametrize(
    ("given", "charged", "limit"),
    [
        (0.1, "0.100000000000", "0.100000000000"),
        (0.0000010000001, "0.000001000001", "0.000001000000"),
        (0.3333333333333333, "0.333333333334", "0.333333333333"),
        ("2.5", "2.500000000000", "2.500000000000"),
        (Decimal("1e-13"), "0.000000000001", "0.000000000000"),
        (7, "7.000000000000", "7.000000000000"),
    ],
)
def test_a_charge_rounds_up_and_a_limit_rounds_down(
    given: float | str | Decimal, charged: str, limit: str
) -> None:
    assert budget.charged(given) == Decimal(charged)
    assert budget.limit(given) == Decimal(limit)
    assert budget.limit(given) <= Decimal(str(given)) <= budget.charged(given)
    assert budget.charged(given).as_tuple().exponent == -budget.EPSILON_SCALE


def test_the_float_sent_back_is_never_above_the_amount() -> None:
    rng = np.random.default_rng(3)
    for _ in range(2000):
        amount = budget.charged(float(rng.uniform(1e-6, 10)))
        value = budget.float_at_most(amount)
        assert Decimal(value) <= amount
        assert Decimal(math.nextafter(value, math.inf)) > amount  # and the largest such
    assert budget.float_at_most(Decimal(0)) == 0.0


def test_remaining_and_what_fits() -> None:
    assert budget.remaining(Decimal("0.4"), CAP) == Decimal("0.6")
    assert budget.remaining(CAP + PICO, CAP) == 0  # never negative
    # k charges of per_part(total, k) never pass total
    for total, k in ((Decimal(1), 3), (Decimal("0.000001"), 7), (Decimal("2.5"), 4)):
        part = budget.per_part(total, k)
        assert part * k <= total < (part + PICO) * k
    assert budget.largest_affordable([Decimal("0.5"), Decimal("0.25")], Decimal("1e-6")) == (
        Decimal("0.25")
    )
    assert budget.largest_affordable([Decimal("1e-7")], Decimal("1e-6")) == 0


def test_a_budget_is_a_value() -> None:
    account = Budget(cap=CAP, spent=Decimal("0.7"))
    assert account.fits(Decimal("0.3")) and not account.fits(Decimal("0.3") + PICO)
    after = account.after(Decimal("0.3"))
    assert after == Budget(CAP, CAP) and after.remaining == 0 and account.spent == Decimal("0.7")
    with pytest.raises(AttributeError):
        account.spent = Decimal(0)  # type: ignore[misc]


def test_exhausted_matches_each_user_checked_alone() -> None:
    rng = np.random.default_rng(7)
    spent = {u: Decimal(int(rng.integers(0, 11))) / 10 for u in range(20)}
    users = np.arange(25)  # 20..24 have no account: nothing spent
    eps = Decimal("0.3")
    got = budget.exhausted(spent, users, eps, CAP)
    want = [spent.get(u, Decimal(0)) + eps > CAP for u in range(25)]
    assert got.tolist() == want
    assert budget.over_cap(range(25), spent, eps, CAP) == [u for u in range(25) if want[u]]
