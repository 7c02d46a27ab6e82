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
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.core.data.occupancy import distinct
from app.datasets.grid_store import SlotGrid
from app.datasets.models import Dataset
from app.keys.service import KeyIdentity
from app.ledger import service as ledger
from app.ledger.accounts import USER_BITS, USER_MASK, Accounts
from app.releases.planning import Occupancy, SlotPlan
from app.time.budget_windows import privacy_unit, window_of


@dataclass(frozen=True)
class ReleaseBudget:
    """The release's users' accounts in every window its grids lie in."""

    occ: Occupancy  # the release's occupancy, users as budget subjects (or their ranks)
    accounts: Accounts  # locked, or read for a preview

    def users(self, subjects: np.ndarray) -> np.ndarray:
        """The user ids of ``subjects`` (distinct, ascending)."""
        return distinct(np.asarray(subjects, dtype=np.int64) & USER_MASK)

    def pairs_of(self, subjects: np.ndarray) -> np.ndarray:
        """Which pairs of :attr:`occ` belong to ``subjects`` (sorted), as a mask."""
        units = self.occ.units
        if units is None:
            return np.isin(self.occ.user, subjects)
        chosen = np.zeros(units.size, dtype=bool)
        chosen[np.searchsorted(units, subjects)] = True  # every subject is some unit's
        return chosen[self.occ.user]


def _subjects(
    dataset: Dataset, grids: Sequence[SlotGrid], occ: Occupancy
) -> tuple[tuple[date, ...], np.ndarray, np.ndarray]:
    """The windows of ``grids`` (ascending), each pair's subject and the distinct subjects
    (ascending, found among ``window index × users + user``, which sort as the subjects)."""
    starts = [g.slot_start for g in grids]
    window_at = {s: window_of(dataset, s) for s in set(starts)}  # a span has few slots
    grid_windows = [window_at[s] for s in starts]
    windows = tuple(sorted(set(grid_windows)))
    index = {w: i for i, w in enumerate(windows)}
    of_grid = np.array([index[w] for w in grid_windows], dtype=np.int64)
    if len(windows) == 1:  # window index 0: a subject is its user id
        return windows, occ.user, distinct(occ.user)
    pair_window = of_grid[occ.grid] if occ.grid.size else np.empty(0, dtype=np.int64)
    width = int(occ.user.max()) + 1 if occ.user.size else 1
    seen = distinct(pair_window * width + occ.user)
    wanted = ((seen // width) << USER_BITS) | (seen % width)
    return windows, (pair_window << USER_BITS) | occ.user, wanted


def release_budget(
    session: Session,
    dataset: Dataset,
    epoch: int,
    grids: Sequence[SlotGrid],
    occ: Occupancy,
    *,
    lock: bool,
    windows: tuple[date, ...] | None = None,
    known: Accounts | None = None,
) -> ReleaseBudget:
    """Every account the release may charge: with ``lock``, locked for this transaction
    (windows ascending, users ascending within each: the ledger's lock order);
    without, as read now (a preview). ``windows``: a profile's, whose occupancy's users
    are privacy units numbered 0, 1, ... with ``occ.units`` their budget subjects
    (``app.releases.pooling``). ``known``: these accounts as read before (those it
    holds exist, so only the others may need creating)."""
    if windows is None:
        windows, subjects, wanted = _subjects(dataset, grids, occ)
        occ = replace(occ, user=subjects)
    elif (units := occ.units) is None:
        wanted = distinct(occ.user)
    else:  # the users stay ranks (ascending as their subjects), ``units`` their subjects
        wanted = units[np.flatnonzero(np.bincount(occ.user, minlength=units.size))]
    if lock:
        accounts = ledger.lock_accounts(session, dataset, epoch, windows, wanted, known=known)
    else:
        accounts = ledger.read_accounts(session, dataset, epoch, windows, wanted)
    return ReleaseBudget(occ, accounts)


def same_spends(read: ReleaseBudget, locked: ReleaseBudget) -> bool:
    """Whether every subject of the release has spent as much under the locks as when
    the release read its accounts (else its plan is made again)."""
    # the locked accounts are every subject's (those without one yet: spent 0, ``absent``)
    locked_accounts = locked.accounts
    return bool(
        np.array_equal(read.accounts.spent_of(locked_accounts.subjects), locked_accounts.spent)
    )


def charge_release(
    session: Session, rb: ReleaseBudget, plan: SlotPlan, key: KeyIdentity, release_row_id: int
) -> None:
    """Charge every kept user the per-grid epsilon once per grid where it is kept, each
    grid in its window: one ledger entry per window and distinct number of grids (the
    stored release keeps, per grid, who was kept; admins only)."""
    subjects, n_grids = plan.user_costs(rb.occ)
    ledger.charge_accounts(
        session, rb.accounts, subjects, n_grids, plan.eps.charged,
        key_id=key.id, reference_id=release_row_id,
    )  # fmt: skip


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
