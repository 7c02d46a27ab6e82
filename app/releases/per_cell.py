"""Per-cell epsilon from public counts (docs/math.md §6.10).

A plan for intervals (§6.7) keeps each unit in at most ``k`` cells and charges ``C/k``
in each. Here the same kept sets share each unit's ``C`` unequally: ``C`` is cut into
``Q`` quanta ``q`` (``per_part(C, Q)``, an exact decimal rounded down), cell ``c`` is
released at ``w_c`` quanta and each unit it keeps pays ``w_c`` quanta, so a unit pays
``q`` times the sum of its cells' weights, at most ``Q·q <= C``:

1. each cell's need: the fewest quanta at which its public ci95 width (every statistic
   asked, at its share of ``w·q``) is at most ``useful_width`` (none when even the most
   is not enough);
2. cells that can become useful, the fewest quanta per record and unit first, take their
   need while every unit they keep has that many quanta left;
3. what each unit has left is split equally among its cells: a cell gets the least of its
   units' offers on top; a cell not made useful suppresses the units with nothing to offer
   (a cell left with none is withheld, charging nobody).

Everything read is public (occupancy, the kept sets, ``U``, ``C``, the widths' rule), and
the weighted plan is released only when its public score beats the equal plan's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from app import budget, core
from app.answers.epsilon import MIN_EPSILON, EpsilonAmount, equal_share
from app.core.data.results import statistic_range
from app.releases.planning import Occupancy, SlotPlan, exact_amount, multiple

#: Quanta of ``C`` per unit: at least this many (a multiple of ``k``).
QUANTA = 32

Score = tuple[int, float]


@dataclass(frozen=True)
class WidthRule:
    """What makes a cell useful: the statistics asked, their mechanism and ``useful_width``."""

    statistics: tuple[str, ...]
    U: float
    mechanism: str
    options: dict[str, Any]
    useful_width: float

    def widths(
        self, counts: np.ndarray, caps: np.ndarray, eps: EpsilonAmount
    ) -> tuple[float, float]:
        """(the widest public ci95 of the statistics asked, each at its share of ``eps``;
        the widest as a share of its statistic's range)."""
        used = equal_share(eps, len(self.statistics)).used
        raw, share = 0.0, 0.0
        for s in self.statistics:
            w = core.expected_ci95_width(
                s, counts, self.U, used, self.mechanism, caps=caps, **self.options
            )
            lo, hi = statistic_range(s, self.U)
            raw, share = max(raw, w), max(share, w / (hi - lo))
        return raw, share

    def useful(self, counts: np.ndarray, caps: np.ndarray, eps: EpsilonAmount) -> bool:
        return self.widths(counts, caps, eps)[0] <= self.useful_width


def score(
    rule: WidthRule, occ: Occupancy, kept: np.ndarray, eps_of: Sequence[EpsilonAmount | None]
) -> Score:
    """(records in useful cells, minus the record-weighted sum of widths as shares of
    their ranges) of the cells that keep a unit, cell ``i`` at ``eps_of[i]``: larger is
    better."""
    useful, weighted = 0, 0.0
    for i, eps in enumerate(eps_of):
        lo, hi = int(occ.bounds[i]), int(occ.bounds[i + 1])
        if eps is None or not kept[lo:hi].any():
            continue
        records = int(occ.count[lo:hi].sum())
        width, share = rule.widths(occ.count[lo:hi], kept[lo:hi], eps)
        weighted += records * share
        useful += records if width <= rule.useful_width else 0
    return useful, -weighted


def _need(rule: WidthRule, counts: np.ndarray, caps: np.ndarray, q: EpsilonAmount, top: int) -> int:
    """The fewest quanta (``<= top``) at which the cell is useful; 0: none is enough."""
    if not rule.useful(counts, caps, multiple(q, top)):
        return 0
    lo, hi = 0, top  # useful at hi, not known at lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rule.useful(counts, caps, multiple(q, mid)):
            hi = mid
        else:
            lo = mid
    return hi


def per_cell_weights(
    occ: Occupancy, kept: np.ndarray, rule: WidthRule, q: EpsilonAmount, Q: int, top: int
) -> tuple[np.ndarray, np.ndarray]:
    """(weights per grid, kept counts per pair) of the module docstring: every unit's
    weights sum to at most ``Q``; each weight is at most ``top``."""
    n_grids = occ.bounds.size - 1
    keep = kept > 0
    users, unit_of = np.unique(occ.user, return_inverse=True)
    left = np.full(users.size, Q, dtype=np.int64)
    need = np.zeros(n_grids, dtype=np.int64)
    density = np.zeros(n_grids)
    for i in range(n_grids):
        lo, hi = int(occ.bounds[i]), int(occ.bounds[i + 1])
        n_kept = int(np.count_nonzero(keep[lo:hi]))
        if n_kept:
            need[i] = _need(rule, occ.count[lo:hi], kept[lo:hi], q, top)
            if need[i]:
                density[i] = float(occ.count[lo:hi].sum()) / (need[i] * n_kept)
    weights = np.zeros(n_grids, dtype=np.int64)
    for i in np.argsort(-density, kind="stable").tolist():
        if not need[i]:
            break
        pairs = np.arange(occ.bounds[i], occ.bounds[i + 1])
        who = unit_of[pairs[keep[pairs]]]
        if int(left[who].min()) >= need[i]:
            left[who] -= need[i]
            weights[i] = need[i]
    cells_of_unit = np.bincount(unit_of[keep], minlength=users.size)
    offer = left // np.maximum(cells_of_unit, 1)
    out = kept.copy()
    for i in range(n_grids):
        lo, hi = int(occ.bounds[i]), int(occ.bounds[i + 1])
        here = np.flatnonzero(keep[lo:hi]) + lo
        if not here.size:
            continue
        offers = offer[unit_of[here]]
        if weights[i]:
            weights[i] = min(weights[i] + int(offers.min()), top)
            continue
        paying = offers > 0
        out[here[~paying]] = 0  # nothing left to pay with: suppressed here
        weights[i] = min(int(offers[paying].min()), top) if paying.any() else 0
    return weights, out


def best_at_k(
    occ: Occupancy,
    kept: np.ndarray,
    k: int,
    cost_cap: Decimal,
    max_epsilon: Decimal,
    rule: WidthRule,
    G1: int,
    K: int,
) -> tuple[Score, SlotPlan] | None:
    """The better (by :func:`score`) of the equal plan at ``C/k`` on ``kept`` and its per-cell
    weighting; None if ``C/k`` is below the smallest epsilon."""
    value = min(budget.per_part(cost_cap, k), max_epsilon)
    if value < MIN_EPSILON:
        return None
    amount = exact_amount(value)
    n_grids = occ.bounds.size - 1
    equal = SlotPlan(amount, G1, K, kept)
    best = (score(rule, occ, kept, [amount] * n_grids), equal)
    Q = k * -(-QUANTA // k)
    quantum = budget.per_part(cost_cap, Q)
    if quantum < MIN_EPSILON or not kept.any():
        return best
    q = exact_amount(quantum)
    top = min(Q, int(max_epsilon // q.charged))
    weights, out = per_cell_weights(occ, kept, rule, q, Q, top)
    out[np.repeat(weights == 0, np.diff(occ.bounds))] = 0
    plan = SlotPlan(q, G1, 0, out, weights)
    paid = plan.user_costs(occ)[1]
    plan = SlotPlan(q, G1, int(paid.max()) if paid.size else 0, out, weights)
    _check_cost(plan, Q)
    got = score(rule, occ, out, [multiple(q, int(w)) if w else None for w in weights])
    return (got, plan) if got > best[0] else best


def _check_cost(plan: SlotPlan, Q: int) -> None:
    """Every unit's weights sum to at most ``Q`` by construction; checked before release."""
    if plan.K > Q:
        raise RuntimeError("a per-cell plan charges a unit more than max_user_cost")
