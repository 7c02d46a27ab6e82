"""Plans for useful intervals (``objective: interval``; docs/math.md §6.7).

Clip-User (§6.5) suppresses users to cut the error of a plan; a suppressed user's
records still count in the grid's true mean, so every suppression widens the honest
interval by up to that user's share of the grid times ``U``. Planned for intervals,
each user is instead kept in the ``k`` grids where it holds the largest share of the
records (so its cost is at most ``k·ε`` with ``ε = C/k``), and ``k`` is the candidate
whose plan puts the most records in grids whose public ci95 width
(``capped_weights``, §5.12) is at most ``useful_width``. With ``epsilon`` given nobody
is suppressed: at a fixed ``ε`` a suppression never narrows an interval. Given the
statistics' :class:`~app.releases.per_cell.WidthRule`, each candidate's kept sets may share
each user's ``C`` unequally between cells (per-cell ε, ``app.releases.per_cell``, §6.10),
scored by the widths the release states. Everything read here is public: occupancy,
``U``, ``ε``, ``C``. (Weighting is tried at the best equal ``k`` and at the largest.)
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from app import budget
from app.answers.epsilon import MIN_EPSILON, EpsilonAmount
from app.core.planning.partition import narrowest_width
from app.kit.errors import InvalidRequest
from app.releases.per_cell import CellWidths, WidthRule, best_at_k, cell_widths
from app.releases.planning import (
    Occupancy,
    SlotPlan,
    exact_amount,
    grids_per_user,
    live_pairs,
)

#: Candidate ``k`` (grids per user): every one up to 8, then about 1.5× apart.
_SMALL_K = 8


def candidate_ks(G1: int) -> list[int]:
    ks = list(range(1, min(G1, _SMALL_K) + 1))
    while ks[-1] < G1:
        ks.append(min(G1, int(ks[-1] * 1.5)))
    return ks


def top_k_kept(occ: Occupancy, live: np.ndarray, k: int) -> np.ndarray:
    """Γ per pair: each live user keeps all its records in the ``k`` grids where its
    share of the grid's records is largest (ties: the earlier grid), 0 elsewhere."""
    records = np.bincount(occ.grid, weights=occ.count, minlength=occ.bounds.size - 1)
    share = occ.count / records[occ.grid]
    idx = np.flatnonzero(live)
    order = idx[np.lexsort((occ.grid[idx], -share[idx], occ.user[idx]))]
    users = occ.user[order]
    first = np.searchsorted(users, users, side="left")  # users are sorted in ``order``
    rank = np.arange(order.size) - first
    kept = np.zeros(occ.user.size, dtype=np.int64)
    chosen = order[rank < k]
    kept[chosen] = occ.count[chosen]
    return kept


def interval_score(
    occ: Occupancy, kept: np.ndarray, U: float, eps: float, useful_width: float
) -> tuple[int, float]:
    """(records in grids whose public ci95 width at ``eps`` is at most ``useful_width``,
    minus the record-weighted sum of all widths): larger is better."""
    useful, weighted = 0, 0.0
    for i in range(occ.bounds.size - 1):
        lo, hi = occ.bounds[i], occ.bounds[i + 1]
        caps = kept[lo:hi]
        if not caps.any():
            continue
        records = int(occ.count[lo:hi].sum())
        width = narrowest_width(occ.count[lo:hi], U, eps, caps=caps)
        weighted += records * width
        useful += records if width <= useful_width else 0
    return useful, -weighted


def plan_at_k(
    occ: Occupancy,
    live: np.ndarray,
    U: float,
    k: int,
    cost_cap: Decimal,
    max_epsilon: Decimal,
    n_statistics: int,
    useful_width: float | None = None,
    widths: CellWidths | None = None,
    weigh: bool = True,
) -> tuple[tuple[int, float], SlotPlan] | None:
    """The top-``k`` plan at ``ε = C/k`` and its score (with ``widths``: scored by the
    statistics' widths, and with ``weigh`` the better of it and its per-cell weighting);
    None if that ``ε`` is too small."""
    kept = top_k_kept(occ, live, k)
    if widths is not None:
        G1, K = grids_per_user(occ.user[live]), grids_per_user(occ.user[kept > 0])
        return best_at_k(occ, kept, k, cost_cap, max_epsilon, widths, G1, K, weigh)
    value = min(budget.per_part(cost_cap, k), max_epsilon)
    if value < MIN_EPSILON:
        return None
    amount = exact_amount(value)
    useful = 0.2 * U if useful_width is None else useful_width
    score = interval_score(occ, kept, U, amount.used / n_statistics, useful)
    G1 = grids_per_user(occ.user[live])
    return score, SlotPlan(amount, G1, grids_per_user(occ.user[kept > 0]), kept)


def plan_for_intervals(
    occ: Occupancy,
    excluded: np.ndarray | None,
    U: float,
    *,
    eps: EpsilonAmount | None,
    cost_cap: Decimal | None,
    max_epsilon: Decimal,
    n_statistics: int,
    useful_width: float | None = None,
    rule: WidthRule | None = None,
) -> SlotPlan:
    """The plan of the module docstring: at ``eps`` (nobody suppressed) or within
    ``cost_cap`` (the best ``k``; per cell with ``rule``)."""
    live = live_pairs(occ, excluded)
    G1 = grids_per_user(occ.user[live])
    if eps is not None or G1 == 0:
        kept = np.where(live, occ.count, 0)
        amount = eps if eps is not None else exact_amount(max_epsilon)
        return SlotPlan(amount, G1, G1, kept)
    if cost_cap is None:
        raise InvalidRequest("give epsilon or max_user_cost")
    best: tuple[tuple[int, float], SlotPlan] | None = None
    widths = cell_widths(rule, occ, cost_cap, max_epsilon)
    best_k, ks = 0, []
    for k in candidate_ks(G1):
        got = plan_at_k(
            occ, live, U, k, cost_cap, max_epsilon, n_statistics, useful_width, widths, False
        )
        if got is None:
            break
        ks.append(k)
        if best is None or got[0] > best[0]:
            best, best_k = got, k
    if widths is not None:  # per cell: at the best equal k, and keeping everyone (the last)
        for k in sorted({best_k, ks[-1]} if ks else set()):
            got = plan_at_k(
                occ, live, U, k, cost_cap, max_epsilon, n_statistics, useful_width, widths
            )
            if got is not None and (best is None or got[0] > best[0]):
                best = got
    if best is None:
        raise InvalidRequest(
            f"max_user_cost {cost_cap} is too small: every per-grid epsilon would be "
            f"below {MIN_EPSILON}"
        )
    return best[1]
