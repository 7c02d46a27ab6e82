"""Per-cell epsilon (docs/math.md §6.10) against brute force on small occupancies: no unit
is charged more than ``max_user_cost``, exactly, and the weighting is never scored worse
than the equal plans it replaces."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from app import budget
from app.answers.epsilon import EpsilonAmount, equal_share
from app.releases import per_cell
from app.releases.interval_plan import candidate_ks, plan_for_intervals, top_k_kept
from app.releases.per_cell import CellWidths, WidthRule, cell_widths, score
from app.releases.planning import Occupancy, SlotPlan, exact_amount

U = 30.0
STATISTICS = [("mean",), ("user_mean",), ("mean", "user_mean")]


def _rule(statistics: tuple[str, ...], width: float = 0.2 * U) -> WidthRule:
    return WidthRule(statistics, U, "auto", {"objective": "interval"}, width)


def _occupancy(rng: np.random.Generator, grids: int, users: int) -> Occupancy:
    ids, counts = [], []
    for _ in range(grids):
        size = int(rng.integers(3, users + 1))
        who = np.sort(rng.choice(users, size=size, replace=False))
        ids.append(who.astype(np.int64))
        counts.append(rng.integers(1, 6, size=who.size).astype(np.int64))
    return Occupancy.of(ids, counts)


def unit_charges(occ: Occupancy, plan: SlotPlan) -> dict[int, Decimal]:
    """Each kept unit's charge, summed here grid by grid from each grid's own epsilon."""
    out: dict[int, Decimal] = {}
    for i in range(occ.bounds.size - 1):
        lo, hi = int(occ.bounds[i]), int(occ.bounds[i + 1])
        for user, kept in zip(occ.user[lo:hi].tolist(), plan.kept[lo:hi].tolist(), strict=True):
            if kept > 0:
                out[user] = out.get(user, Decimal(0)) + plan.grid_eps(i).charged
    return out


def audit_costs(occ: Occupancy, plan: SlotPlan, cap: Decimal) -> list[str]:
    """Every way the plan could overspend: a unit charged above ``cap`` (exact decimals),
    the ledger's charge (quantum × quanta) differing from the grids' sum, a grid's float
    above its charge, or its statistics' shares above the grid's float."""
    bad = []
    charges = unit_charges(occ, plan)
    users, quanta = plan.user_costs(occ)
    for user, paid in zip(users.tolist(), quanta.tolist(), strict=True):
        if plan.eps.charged * paid != charges[user]:
            bad.append(f"unit {user}: ledger {plan.eps.charged * paid} != {charges[user]}")
        if charges[user] > cap:
            bad.append(f"unit {user} charged {charges[user]} > {cap}")
    if plan.max_cost > cap:
        bad.append(f"max_cost {plan.max_cost} > {cap}")
    for i in range(occ.bounds.size - 1):
        eps = plan.grid_eps(i)
        if Fraction(eps.used) > Fraction(eps.charged):
            bad.append(f"grid {i}: used {eps.used} > charged {eps.charged}")
        for n in (1, 2):
            if Fraction(equal_share(eps, n).used) * n > Fraction(eps.used):
                bad.append(f"grid {i}: {n} shares above {eps.used}")
    return bad


def _plan(occ: Occupancy, cap: Decimal, rule: WidthRule | None) -> SlotPlan:
    return plan_for_intervals(
        occ, None, U, eps=None, cost_cap=cap, max_epsilon=Decimal(10),
        n_statistics=len(rule.statistics) if rule else 1, useful_width=0.2 * U, rule=rule,
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(24))
def test_no_unit_pays_more_than_the_cap_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    occ = _occupancy(rng, grids=int(rng.integers(2, 7)), users=int(rng.integers(6, 30)))
    cap = [Decimal("2"), Decimal("0.7"), Decimal("1.3"), Decimal("5")][seed % 4]
    statistics = STATISTICS[seed % 3]
    width = [0.2, 0.5, 0.8][seed % 3] * U  # some cells useful, some not
    plan = _plan(occ, cap, _rule(statistics, width))
    assert audit_costs(occ, plan, cap) == []


def test_the_weighting_is_never_scored_below_an_equal_plan() -> None:
    weighted = 0
    for seed in range(30):
        rng = np.random.default_rng(1000 + seed)
        occ = _occupancy(rng, grids=5, users=int(rng.integers(12, 40)))
        rule = _rule(STATISTICS[seed % 3], 0.4 * U)
        cap = Decimal("2")
        plan = _plan(occ, cap, rule)
        widths = cell_widths(rule, occ, cap, Decimal(10))
        mine = score(widths, plan.kept, [plan.grid_eps(i) for i in range(5)])
        G1 = int(np.unique(occ.user, return_counts=True)[1].max())
        live = np.ones(occ.user.size, dtype=bool)
        for k in candidate_ks(G1):
            kept = top_k_kept(occ, live, k)
            amount = exact_amount(budget.per_part(cap, k))
            assert score(widths, kept, [amount] * 5) <= mine
        weighted += plan.weights is not None
    assert weighted > 0  # the weighting wins somewhere


def _two_cells() -> Occupancy:
    """Cell A: 30 units of its own and 10 shared; cell B: 15 of its own and the 10."""
    shared = list(range(100, 110))
    a = np.array(list(range(30)) + shared, dtype=np.int64)
    b = np.array(list(range(200, 215)) + shared, dtype=np.int64)
    return Occupancy.of([np.sort(a), np.sort(b)], [np.ones(40, np.int64), np.ones(25, np.int64)])


def test_per_cell_epsilon_makes_both_cells_useful_where_no_equal_plan_does() -> None:
    occ, rule, cap = _two_cells(), _rule(("user_mean",)), Decimal("2")

    def useful(plan: SlotPlan) -> list[bool]:
        out = []
        for i in range(2):
            counts, caps = occ.count[occ.bounds[i] : occ.bounds[i + 1]], plan.caps(occ, i)
            width = rule.widths(counts, caps, plan.grid_eps(i).used)[0]
            out.append(bool(caps.any()) and width <= rule.useful_width)
        return out

    equal = _plan(occ, cap, None)
    assert useful(equal).count(True) == 1
    plan = _plan(occ, cap, rule)
    assert plan.weights is not None and useful(plan) == [True, True]
    # the shared units pay both cells' epsilons: exactly the cap, no more
    charges = unit_charges(occ, plan)
    assert max(charges.values()) <= cap and charges[100] == sum(
        plan.grid_eps(i).charged for i in range(2)
    )
    assert audit_costs(occ, plan, cap) == []


def _broken_weights(
    widths: CellWidths, kept: np.ndarray, q: EpsilonAmount, Q: int, top: int
) -> tuple[np.ndarray, np.ndarray]:
    """A broken copy: each cell gets its need and the shares of a budget it never
    deducts (the greedy's bookkeeping forgotten)."""
    occ = widths.occ
    weights = np.zeros(occ.bounds.size - 1, dtype=np.int64)
    for i in range(weights.size):
        caps = kept[occ.bounds[i] : occ.bounds[i + 1]]
        weights[i] = min(per_cell.need_of(widths, i, caps, q, top) + Q // 2, top)
    return weights, kept.copy()


def test_the_audit_catches_a_copy_that_overspends_a_unit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    occ, rule, cap = _two_cells(), _rule(("user_mean",)), Decimal("2")
    honest = _plan(occ, cap, rule)
    assert audit_costs(occ, honest, cap) == []
    broken: Callable[..., tuple[np.ndarray, np.ndarray]] = _broken_weights
    monkeypatch.setattr(per_cell, "per_cell_weights", broken)
    with pytest.raises(RuntimeError, match="more than max_user_cost"):
        _plan(occ, cap, rule)  # the plan's own check refuses it
    monkeypatch.setattr(per_cell, "_check_cost", lambda plan, Q: None)
    bad = _plan(occ, cap, rule)
    assert any("charged" in line and "> 2" in line for line in audit_costs(occ, bad, cap))
