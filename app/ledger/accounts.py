"""Many budget accounts at once, as arrays (a release locks and charges ~10⁵).

A *subject* packs (budget window index, user id) as ``index << USER_BITS | user``, so sorting
subjects gives the ledger's lock order. Spends are integer quanta, so each cap test is one exact
array operation (``app.budget.over_cap_counts``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

import numpy as np
import numpy.typing as npt

from app import budget

#: A subject is ``window index << USER_BITS | user id`` (user ids are 32-bit serials).
USER_BITS = 32
USER_MASK = (1 << USER_BITS) - 1

Int64s = npt.NDArray[np.int64]


def window_users(subjects: Int64s, index: int) -> Int64s:
    """The users (ascending) of the window at ``index`` among sorted ``subjects``."""
    lo, hi = np.searchsorted(subjects, [index << USER_BITS, (index + 1) << USER_BITS])
    return subjects[lo:hi] & USER_MASK


@dataclass(frozen=True)
class Accounts:
    """The accounts of some subjects of one dataset and epoch, locked or not. Locked, they are
    every subject's: ``absent`` those without an account yet (spent 0), which their first charge
    creates (their windows' creation locks held)."""

    dataset_id: int
    epoch: int
    cap: Decimal
    windows: tuple[date, ...]  # distinct, ascending
    subjects: Int64s  # distinct, ascending
    spent: Int64s  # quanta, aligned with ``subjects``
    absent: Int64s = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # ascending

    def spent_of(self, subjects: npt.ArrayLike) -> Int64s:
        """The spend (quanta) of each of ``subjects``; 0 for one without an account."""
        wanted = np.asarray(subjects, dtype=np.int64)
        if not self.subjects.size:
            return np.zeros(wanted.size, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.subjects, wanted), self.subjects.size - 1)
        return np.where(self.subjects[at] == wanted, self.spent[at], 0).astype(np.int64)

    def over_cap(self, subjects: npt.ArrayLike, grids: npt.ArrayLike, epsilon: Decimal) -> Int64s:
        """Those of ``subjects`` whom ``grids`` charges of ``epsilon`` would push past the cap."""
        wanted = np.asarray(subjects, dtype=np.int64)
        over = budget.over_cap_counts(
            self.spent_of(wanted), np.asarray(grids, dtype=np.int64), epsilon, self.cap
        )
        return wanted[over]

    def largest_epsilon(self, subjects: npt.ArrayLike, grids: npt.ArrayLike) -> Decimal:
        """The largest epsilon that ``grids`` charges of keep each subject within the cap."""
        wanted = np.asarray(subjects, dtype=np.int64)
        left = np.maximum(budget.quanta(budget.limit(self.cap)) - self.spent_of(wanted), 0)
        return budget.largest_part(left, np.asarray(grids, dtype=np.int64))
