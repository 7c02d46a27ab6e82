"""The privacy budget as one value type: epsilon amounts, their rounding, the cap test
(docs/math.md §10).

Amounts are decimals on the ledger's quantum (``NUMERIC(24, 12)``). Rounding favours privacy: a
charge rounds up (:func:`charged`), a limit down (:func:`limit`), and noise is calibrated to at
most what was charged (:func:`float_at_most`). The cap test is :func:`fits`;
``dpgate_commit_query`` repeats it in SQL, held equal by
``tests/integration/test_ledger_commit.py``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

import numpy as np
import numpy.typing as npt

EPSILON_SCALE = 12
#: The smallest amount the ledger holds (``1e-12``).
QUANTUM = Decimal(1).scaleb(-EPSILON_SCALE)
ZERO = Decimal(0)

Amount = float | int | Decimal | str


def _decimal(value: Amount) -> Decimal:
    # str() of a float is its shortest repr (0.1 -> "0.1"), the number the client wrote
    return Decimal(str(value)) if isinstance(value, float) else Decimal(value)


def charged(value: Amount) -> Decimal:
    """``value`` as an amount to charge: rounded **up** to the ledger's quantum."""
    return _decimal(value).quantize(QUANTUM, rounding=ROUND_CEILING)


def limit(value: Amount) -> Decimal:
    """``value`` as a limit (a cap, a quota, what is left, what fits): rounded **down**."""
    return _decimal(value).quantize(QUANTUM, rounding=ROUND_FLOOR)


def float_at_most(amount: Decimal) -> float:
    """The largest double not above ``amount`` (the epsilon that calibrates it)."""
    value = float(amount)
    while value > 0 and Decimal(value) > amount:
        value = math.nextafter(value, 0.0)
    return value


def fits(spent: Decimal, epsilon: Decimal, cap: Decimal) -> bool:
    """Whether ``epsilon`` more on top of ``spent`` stays within ``cap``."""
    return spent + epsilon <= cap


def would_exceed(spent: Decimal, epsilon: Decimal, cap: Decimal) -> bool:
    """Whether charging ``epsilon`` on top of ``spent`` passes ``cap``."""
    return not fits(spent, epsilon, cap)


def remaining(spent: Decimal, cap: Decimal) -> Decimal:
    """What is left under ``cap`` after ``spent`` (never negative)."""
    return max(ZERO, cap - spent)


def per_part(total: Decimal, parts: int) -> Decimal:
    """The largest amount that ``parts`` charges of it never pass ``total``."""
    return limit(total / parts)


def largest_affordable(limits: Iterable[Decimal], minimum: Decimal) -> Decimal:
    """The largest epsilon within every one of ``limits``, rounded down; 0 below ``minimum``."""
    fit = limit(min(limits))
    return fit if fit >= minimum else ZERO


@dataclass(frozen=True)
class Budget:
    """One account: a limit (a user's ``budget_per_user``, a key's quota) and its spend."""

    cap: Decimal
    spent: Decimal = ZERO

    @property
    def remaining(self) -> Decimal:
        return remaining(self.spent, self.cap)

    def fits(self, epsilon: Decimal) -> bool:
        return fits(self.spent, epsilon, self.cap)

    def after(self, epsilon: Decimal) -> Budget:
        """The account once ``epsilon`` is charged (callers check :meth:`fits` first)."""
        return Budget(self.cap, self.spent + epsilon)


def exhausted(
    spent: Mapping[int, Decimal], user_ids: npt.ArrayLike, epsilon: Decimal, cap: Decimal
) -> npt.NDArray[np.bool_]:
    """Bool per user: would ``epsilon`` more pass ``cap`` (no entry in ``spent``: nothing spent)?"""
    users = np.asarray(user_ids)
    return np.fromiter(
        (would_exceed(spent.get(int(u), ZERO), epsilon, cap) for u in users),
        dtype=bool,
        count=len(users),
    )


def over_cap(
    users: Iterable[int], spent: Mapping[int, Decimal], epsilon: Decimal, cap: Decimal
) -> list[int]:
    """The users whom ``epsilon`` more would push past ``cap``."""
    return [u for u in users if would_exceed(spent.get(u, ZERO), epsilon, cap)]


# Whole accounts at once: amounts as integer quanta (``QUANTUM``) in int64 arrays. A
# stored spend is read clamped to ``SPENT_CLAMP`` (above any cap, ``budget_per_user``
# <= 1e6), so every count fits: the clamp changes no verdict.
SPENT_CLAMP = Decimal(2_000_000)


def quanta(amount: Decimal) -> int:
    """``amount`` (a ledger amount, on the quantum) as a whole number of quanta."""
    return int(amount.scaleb(EPSILON_SCALE))


def over_cap_counts(
    spent: npt.NDArray[np.int64], grids: npt.NDArray[np.int64], epsilon: Decimal, cap: Decimal
) -> npt.NDArray[np.bool_]:
    """Bool per account: would ``grids`` charges of ``epsilon`` pass ``cap`` on top of ``spent``
    (quanta)? :func:`fits` exactly, as ``k <= (cap - spent) // e`` (no overflowing product)."""
    eps = quanta(charged(epsilon))
    room = quanta(limit(cap)) - np.asarray(spent, dtype=np.int64)
    if eps == 0:
        return room < 0
    return np.asarray(grids, dtype=np.int64) > room // eps


def largest_part(remaining: npt.NDArray[np.int64], parts: npt.NDArray[np.int64]) -> Decimal:
    """``min(per_part(r, k))`` over the (non-empty) accounts, in whole quanta."""
    return Decimal(int((np.asarray(remaining) // np.asarray(parts)).min())).scaleb(-EPSILON_SCALE)
