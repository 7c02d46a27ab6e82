"""Per-cell epsilon from public counts (docs/math.md §6.10).

A plan for intervals (§6.7) keeps each unit in at most ``k`` cells and charges ``C/k``
in each. Here the same kept sets share each unit's ``C`` unequally: ``C`` is cut into
``Q`` quanta ``q`` (``per_part(C, Q)``, an exact decimal rounded down), cell ``c`` is
released at ``w_c`` quanta and each unit it keeps pays ``w_c`` quanta, so a unit pays
``q`` times the sum of its cells' weights, at most ``Q·q <= C``:

1. each cell's need: the fewest quanta at which its public ci95 width (every statistic
   asked, at its share of ``w·q``) is at most ``useful_width`` (none when even the most
   is not enough), read on a ladder of epsilons eight to an octave (:class:`CellWidths`:
   a width at an epsilon is the one at the ladder's rung at or below it, cached per cell,
   so the candidates ``k`` share the work);
2. cells that can become useful, the fewest quanta per record and unit first, take their
   need while every unit they keep has that many quanta left;
3. what each unit has left is split equally among its cells: a cell gets the least of its
   units' offers on top; a cell not made useful suppresses the units with nothing to offer
   (a cell left with none is withheld, charging nobody).

Everything read is public (occupancy, the kept sets, ``U``, ``C``, the widths' rule), and
the weighted plan is released only when its public score beats the equal plan's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np

from app import budget, core
from app.answers.epsilon import MIN_EPSILON, EpsilonAmount, equal_share
from app.core.data.occupancy import unique_inverse
from app.core.data.results import statistic_range
from app.releases.planning import Occupancy, SlotPlan, exact_amount, multiple

#: Quanta of ``C`` per unit: at least this many (a multiple of ``k``).
QUANTA = 32
#: The widths' ladder: rungs per octave of epsilon, and octaves below the top.
RUNGS, OCTAVES = 8, 12

Score = tuple[int, float]


@dataclass(frozen=True)
class WidthRule:
    """What makes a cell useful: the statistics asked, their mechanism and ``useful_width``."""

    statistics: tuple[str, ...]
    U: float
    mechanism: str
    options: dict[str, Any]
    useful_width: float

    def widths(self, counts: np.ndarray, caps: np.ndarray, eps: float) -> tuple[float, float]:
        """(the widest public ci95 of the statistics asked, each at its share of ``eps``;
        the widest as a share of its statistic's range)."""
        used = equal_share(EpsilonAmount(Decimal(eps), eps), len(self.statistics)).used
        raw, share = 0.0, 0.0
        for s in self.statistics:
            w = core.expected_ci95_width(
                s, counts, self.U, used, self.mechanism, caps=caps, **self.options
            )
            lo, hi = statistic_range(s, self.U)
            raw, share = max(raw, w), max(share, w / (hi - lo))
        return raw, share


@dataclass
class CellWidths:
    """The cells of ``occ`` under ``rule``, their widths read on a ladder of epsilons
    ``top·2^(-j/RUNGS)``: at an epsilon, the widths at the highest rung not above it (the
    widths shrink as epsilon grows, so this never calls a cell useful that is not)."""

    rule: WidthRule
    occ: Occupancy
    top: float
    _cache: dict[tuple[int, bytes, int], tuple[float, float]] = field(default_factory=dict)
    _exact: dict[tuple[int, bytes, float], tuple[float, float]] = field(default_factory=dict)

    def _rung(self, eps: float) -> int | None:
        if eps >= self.top:
            return 0
        j = math.ceil(RUNGS * math.log2(self.top / eps) - 1e-9)
        while j > 0 and self._eps(j) > eps:
            j += 1
        return j if j <= RUNGS * OCTAVES else None

    def _eps(self, j: int) -> float:
        return self.top * 2.0 ** (-j / RUNGS)

    def _at_rung(self, i: int, caps: np.ndarray, j: int) -> tuple[float, float]:
        key = (i, caps.tobytes(), j)
        got = self._cache.get(key)
        if got is None:
            lo, hi = int(self.occ.bounds[i]), int(self.occ.bounds[i + 1])
            got = self._cache[key] = self.rule.widths(self.occ.count[lo:hi], caps, self._eps(j))
        return got

    def exact(self, i: int, caps: np.ndarray, eps: float) -> tuple[float, float]:
        """Cell ``i``'s (width, share) with kept counts ``caps`` at ``eps`` itself (cached)."""
        key = (i, caps.tobytes(), eps)
        got = self._exact.get(key)
        if got is None:
            lo, hi = int(self.occ.bounds[i]), int(self.occ.bounds[i + 1])
            got = self._exact[key] = self.rule.widths(self.occ.count[lo:hi], caps, eps)
        return got

    def need(self, i: int, caps: np.ndarray) -> tuple[float, float]:
        """The least rung's epsilon at which cell ``i`` is useful and the next rung's, at
        which it is not (inf, inf: not useful even at the top; 0 below the ladder)."""
        useful = self.rule.useful_width
        last = RUNGS * OCTAVES
        if self._at_rung(i, caps, 0)[0] > useful:
            return math.inf, math.inf
        if self._at_rung(i, caps, last)[0] <= useful:
            return self._eps(last), 0.0
        lo, hi = 0, last  # useful at rung lo, not at rung hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._at_rung(i, caps, mid)[0] <= useful:
                lo = mid
            else:
                hi = mid
        return self._eps(lo), self._eps(hi)


def score(widths: CellWidths, kept: np.ndarray, eps_of: list[EpsilonAmount | None]) -> Score:
    """(records in useful cells, minus the record-weighted sum of widths as shares of
    their ranges) of the cells that keep a unit, cell ``i`` at ``eps_of[i]``: larger is
    better."""
    occ = widths.occ
    useful, weighted = 0, 0.0
    for i, eps in enumerate(eps_of):
        lo, hi = int(occ.bounds[i]), int(occ.bounds[i + 1])
        if eps is None or not kept[lo:hi].any():
            continue
        records = int(occ.count[lo:hi].sum())
        width, share = widths.exact(i, kept[lo:hi], eps.used)
        weighted += records * share
        useful += records if width <= widths.rule.useful_width else 0
    return useful, -weighted


def need_of(widths: CellWidths, i: int, caps: np.ndarray, q: EpsilonAmount, top: int) -> int:
    """The fewest quanta (``<= top``) at which cell ``i`` is useful; 0: none is enough. The
    ladder brackets it (useful at its rung, not at the next), exact widths settle it."""
    useful_at, not_at = widths.need(i, caps)
    if not math.isfinite(useful_at):
        return 0
    hi = max(1, math.ceil(useful_at / q.used))
    while multiple(q, hi).used < useful_at:
        hi += 1
    lo = max(0, min(hi - 1, math.floor(not_at / q.used)))
    while lo > 0 and multiple(q, lo).used > not_at:
        lo -= 1
    bound = widths.rule.useful_width
    while hi - lo > 1:  # useful at hi; not at lo (or lo = 0)
        mid = (lo + hi) // 2
        if widths.exact(i, caps, multiple(q, mid).used)[0] <= bound:
            hi = mid
        else:
            lo = mid
    return hi if hi <= top else 0


def per_cell_weights(
    widths: CellWidths, kept: np.ndarray, q: EpsilonAmount, Q: int, top: int
) -> tuple[np.ndarray, np.ndarray]:
    """(weights per grid, kept counts per pair) of the module docstring: every unit's
    weights sum to at most ``Q``; each weight is at most ``top``."""
    occ = widths.occ
    need = np.zeros(occ.bounds.size - 1, dtype=np.int64)
    for i in range(need.size):
        lo, hi = int(occ.bounds[i]), int(occ.bounds[i + 1])
        if kept[lo:hi].any():
            need[i] = need_of(widths, i, kept[lo:hi], q, top)
    return allocate(occ, kept, need, Q, top)


def allocate(
    occ: Occupancy, kept: np.ndarray, need: np.ndarray, Q: int, top: int
) -> tuple[np.ndarray, np.ndarray]:
    """Steps 2 and 3 of the module docstring given each grid's need (0: none): (weights
    per grid, kept counts per pair); every unit's weights sum to at most ``Q``."""
    n_grids = occ.bounds.size - 1
    keep = kept > 0
    users, unit_of = unique_inverse(occ.user)
    left = np.full(users.size, Q, dtype=np.int64)
    n_kept = np.bincount(occ.grid[keep], minlength=n_grids)
    records = np.bincount(occ.grid, weights=occ.count, minlength=n_grids)
    useful = (need > 0) & (n_kept > 0)
    density = np.zeros(n_grids)
    density[useful] = records[useful] / (need[useful] * n_kept[useful])
    weights = np.zeros(n_grids, dtype=np.int64)
    for i in np.argsort(-density, kind="stable").tolist():
        if not useful[i]:
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


def quanta(
    k: int, cost_cap: Decimal, max_epsilon: Decimal
) -> tuple[int, EpsilonAmount, int] | None:
    """``(Q, q, w_max)`` for kept sets of at most ``k`` cells a unit: at least 8 quanta per
    kept cell; None when ``q`` is below the smallest epsilon."""
    Q = QUANTA << max(0, math.ceil(math.log2(k / 4)))
    got = cut(Q, cost_cap, max_epsilon)
    return None if got is None else (Q, *got)


def cut(Q: int, cost_cap: Decimal, max_epsilon: Decimal) -> tuple[EpsilonAmount, int] | None:
    """``C`` cut in ``Q`` quanta: ``(q = per_part(C, Q), w_max)``; None when ``q`` is below
    the smallest epsilon."""
    quantum = budget.per_part(cost_cap, Q)
    if quantum < MIN_EPSILON:
        return None
    q = exact_amount(quantum)
    return q, min(Q, int(max_epsilon // q.charged))


def best_at_k(
    occ: Occupancy,
    kept: np.ndarray,
    k: int,
    cost_cap: Decimal,
    max_epsilon: Decimal,
    widths: CellWidths,
    G1: int,
    K: int,
    weigh: bool = True,
) -> tuple[Score, SlotPlan] | None:
    """The better (by :func:`score`) of the equal plan at ``C/k`` on ``kept`` and (with
    ``weigh``) its per-cell weighting; None if ``C/k`` is below the smallest epsilon."""
    value = min(budget.per_part(cost_cap, k), max_epsilon)
    if value < MIN_EPSILON:
        return None
    amount = exact_amount(value)
    n_grids = occ.bounds.size - 1
    equal = SlotPlan(amount, G1, K, kept)
    best = (score(widths, kept, [amount] * n_grids), equal)
    cut = quanta(k, cost_cap, max_epsilon)
    if not weigh or cut is None or not kept.any():
        return best
    Q, q, top = cut
    weights, out = per_cell_weights(widths, kept, q, Q, top)
    out[np.repeat(weights == 0, np.diff(occ.bounds))] = 0
    plan = SlotPlan(q, G1, 0, out, weights)
    paid = plan.user_costs(occ)[1]
    plan = SlotPlan(q, G1, int(paid.max()) if paid.size else 0, out, weights)
    _check_cost(plan, Q)
    got = score(widths, out, [multiple(q, int(w)) if w else None for w in weights])
    return (got, plan) if got > best[0] else best


def _check_cost(plan: SlotPlan, Q: int) -> None:
    """Every unit's weights sum to at most ``Q`` by construction; checked before release."""
    if plan.K > Q:
        raise RuntimeError("a per-cell plan charges a unit more than max_user_cost")


def cell_widths(
    rule: WidthRule | None, occ: Occupancy, cost_cap: Decimal, max_epsilon: Decimal
) -> CellWidths | None:
    """The cache of :class:`CellWidths` for one occupancy, its ladder topped at the most
    any cell can get; None (equal plans only) when the statistics asked include the
    variance, or no cell could be useful even at that epsilon with every unit kept: the
    floor of docs/math.md §6.10, ``L·ε/S >= 2 ln 20·U/useful_width``."""
    if rule is None or "variance" in rule.statistics:
        return None
    top = float(min(cost_cap, max_epsilon))
    units = np.diff(occ.bounds)
    need = 2 * math.log(20) * rule.U / rule.useful_width * len(rule.statistics)
    if not units.size or float(units.max()) * top < need:
        return None
    return CellWidths(rule, occ, top)
