"""A release's budget per window (docs/math.md §10.4): each grid is charged to the
budget window its slot lies in, and each user's spend is checked per window.

A release may span several windows (a week of hours on a ``day`` dataset). Its plan
is made jointly over all its grids (``max_user_cost`` caps a user's total over the
whole release), but its budget check and charges are per (window, user). Both run on
:attr:`ReleaseBudget.occ`, the release's occupancy with each user replaced by a
*budget subject* — the pair (window, user) packed in one integer — so the planning
functions (``over_budget``, ``largest_affordable``, ``SlotPlan.user_costs``) check and
charge per window unchanged. Without windows there is one window and a subject is its
user id, exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from decimal import Decimal
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app import budget
from app.datasets.grid_store import SlotGrid
from app.datasets.models import Dataset
from app.keys.service import KeyIdentity
from app.ledger import service as ledger
from app.ledger.repository import LedgerRepository
from app.releases.planning import Occupancy, SlotPlan
from app.time.budget_windows import privacy_unit, window_of

#: A subject is ``window index << USER_BITS | user id`` (user ids are 32-bit serials).
USER_BITS = 32
USER_MASK = (1 << USER_BITS) - 1


@dataclass(frozen=True)
class ReleaseBudget:
    """The release's users' accounts in every window its grids lie in."""

    windows: tuple[date, ...]  # distinct, ascending
    occ: Occupancy  # the release's occupancy, users as budget subjects
    spent: dict[int, Decimal]  # subject -> spend (locked, or read for a preview)
    locked: dict[date, ledger.LockedBudget]  # empty for a preview

    def users(self, subjects: np.ndarray) -> np.ndarray:
        """The user ids of ``subjects`` (distinct, ascending)."""
        return np.unique(np.asarray(subjects, dtype=np.int64) & USER_MASK)

    def remaining(self, cap: Decimal) -> dict[int, Decimal]:
        """What each subject has left under ``cap``."""
        return {s: budget.remaining(spent, cap) for s, spent in self.spent.items()}


def _subjects(
    dataset: Dataset, grids: Sequence[SlotGrid], occ: Occupancy
) -> tuple[tuple[date, ...], np.ndarray, dict[date, np.ndarray]]:
    """The windows of ``grids`` (ascending), each pair's subject, each window's users."""
    starts = [g.slot_start for g in grids]
    window_at = {s: window_of(dataset, s) for s in set(starts)}  # a span has few slots
    grid_windows = [window_at[s] for s in starts]
    windows = tuple(sorted(set(grid_windows)))
    index = {w: i for i, w in enumerate(windows)}
    of_grid = np.array([index[w] for w in grid_windows], dtype=np.int64)
    pair_window = of_grid[occ.grid] if occ.grid.size else np.empty(0, dtype=np.int64)
    subjects = (pair_window << USER_BITS) | occ.user
    users = {w: np.unique(occ.user[pair_window == i]) for i, w in enumerate(windows)}
    return windows, subjects, users


def _by_subject(windows: tuple[date, ...], spent: dict[date, dict[int, Decimal]]) -> dict:
    return {(i << USER_BITS) | u: s for i, w in enumerate(windows) for u, s in spent[w].items()}


def lock_release_budget(
    session: Session, dataset: Dataset, epoch: int, grids: Sequence[SlotGrid], occ: Occupancy
) -> ReleaseBudget:
    """Lock every account the release may charge (windows ascending, users ascending
    within each: the ledger's lock order) for this transaction."""
    windows, subjects, users = _subjects(dataset, grids, occ)
    locked = ledger.lock_budgets(session, dataset, epoch, users)
    spent = _by_subject(windows, {w: b.spent for w, b in locked.items()})
    return ReleaseBudget(windows, replace(occ, user=subjects), spent, locked)


def read_release_budget(
    session: Session, dataset: Dataset, epoch: int, grids: Sequence[SlotGrid], occ: Occupancy
) -> ReleaseBudget:
    """The same accounts as :func:`lock_release_budget` reads them now, without locks
    (a preview)."""
    windows, subjects, users = _subjects(dataset, grids, occ)
    repo = LedgerRepository(session)
    spent = {w: repo.spent(dataset.id, epoch, users[w].tolist(), window=w) for w in windows}
    return ReleaseBudget(windows, replace(occ, user=subjects), _by_subject(windows, spent), {})


def charge_release(
    session: Session, rb: ReleaseBudget, plan: SlotPlan, key: KeyIdentity, release_row_id: int
) -> None:
    """Charge every kept user the per-grid epsilon once per grid where it is kept, each
    grid in its window: one ledger entry per window and distinct number of grids (the
    stored release keeps, per grid, who was kept; admins only)."""
    subjects, n_grids = plan.user_costs(rb.occ)
    window_index = subjects >> USER_BITS
    for i, window in enumerate(rb.windows):
        here = window_index == i
        for k in np.unique(n_grids[here]).tolist():
            ledger.charge(
                session,
                rb.locked[window],
                (subjects[here & (n_grids == k)] & USER_MASK).tolist(),
                plan.eps.charged * k,
                key_id=key.id,
                kind="release",
                reference_id=release_row_id,
                grid_id=None,
            )


def with_privacy_unit(answer: dict[str, Any], dataset: Dataset) -> dict[str, Any]:
    """A stored release's answer with ``privacy_unit`` and ``unit`` in each statistic
    answer (releases stored before them lack them; ``privacy_unit`` was ``user`` then)."""
    filled = {"privacy_unit": privacy_unit(dataset), "unit": dataset.value_unit}
    grids = [
        {
            **grid,
            **{
                s: {**filled, **grid[s]}
                for s in ("mean", "variance", "user_mean")
                if isinstance(grid.get(s), dict)
            },
        }
        for grid in answer.get("grids", [])
    ]
    return {**answer, "grids": grids}
