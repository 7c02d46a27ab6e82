"""The partition chosen with its per-cell allocation (docs/math.md §6.10) against brute force
on small trees: its cells are disjoint candidates, its claimed useful records are no more
than any allocation could give (an exhaustive search over disjoint cells and budgets) and
no less than the plan then released gives, and no unit pays more than ``max_user_cost``."""

from __future__ import annotations

import itertools
from decimal import Decimal

import numpy as np
import pytest

from app.core.planning.partition import PartitionTree
from app.releases import refine as refine_module
from app.releases.interval_plan import plan_for_intervals
from app.releases.per_cell import WidthRule, cell_widths, quanta, score
from app.releases.planning import Occupancy, grids_per_user
from app.releases.refine import Candidates, refine

U, MIN_USERS, CAP, MAX_EPS = 30.0, 4, Decimal(4), Decimal(10)
FINEST, COARSEST = 3, 1


def parent_of(cell: int, res: int) -> int:
    return int(str(cell)[:res])


def _tree(seed: int) -> PartitionTree:
    rng = np.random.default_rng(seed)
    fine = [int(f"{a}{b}{c}") for a in (1, 2) for b in (1, 2) for c in (1, 2)]
    rows = []
    for cell in fine:
        for u in rng.choice(40, size=int(rng.integers(5, 15)), replace=False).tolist():
            rows.append((cell, u, int(rng.integers(1, 12))))
    a = np.array(rows)
    return PartitionTree.of(
        a[:, 0], a[:, 1], a[:, 2], finest=FINEST, coarsest=COARSEST, parent_of=parent_of
    )


def _rule(statistic: str) -> WidthRule:
    return WidthRule((statistic,), U, "auto", {"objective": "interval"}, 0.5 * U)


def _disjoint(cells: list[int]) -> bool:
    names = [str(c) for c in cells]
    return not any(a != b and b.startswith(a) for a in names for b in names)


def _best_possible(cands: Candidates, Q: int) -> float:
    """The most records in useful cells over every set of disjoint candidates, each at its
    need in quanta of ``per_part(C, Q)`` and no unit paying more than ``Q`` (exhaustive)."""
    useful = [j for j in range(len(cands.keys)) if cands.need(j, Q)]
    best = 0.0
    for size in range(len(useful) + 1):
        for chosen in itertools.combinations(useful, size):
            if not _disjoint([cands.keys[j][1] for j in chosen]):
                continue
            paid: dict[int, int] = {}
            for j in chosen:
                lo, hi = cands.occ.bounds[j], cands.occ.bounds[j + 1]
                for u in cands.occ.user[lo:hi].tolist():
                    paid[u] = paid.get(u, 0) + cands.need(j, Q)
            if all(v <= Q for v in paid.values()):
                best = max(best, float(sum(cands.records[j] for j in chosen)))
    return best


def _starts(tree: PartitionTree, statistic: str) -> tuple[Candidates, list[list[int]]]:
    rule = _rule(statistic)
    cands = Candidates.of([(0, tree)], min_users=MIN_USERS, rule=rule, cap=CAP, max_epsilon=MAX_EPS)
    index = {key: i for i, key in enumerate(cands.keys)}
    starts = []
    for eps in (2.0, 1.0, 0.5):
        part = tree.choose(min_users=MIN_USERS, U=U, eps=eps, useful_width=0.5 * U,
                           statistics=(statistic,))  # fmt: skip
        starts.append([index[(0, c)] for c in part.released])
    return cands, starts


@pytest.mark.parametrize("statistic", ["mean", "user_mean"])
@pytest.mark.parametrize("seed", range(6))
def test_refined_partition_against_brute_force(statistic: str, seed: int) -> None:
    cands, starts = _starts(_tree(seed), statistic)
    rule = cands.widths.rule
    chosen = refine(cands, starts)
    cells = [cands.keys[j][1] for j in chosen]
    assert _disjoint(cells) and all(cands.occ.bounds[j + 1] - cands.occ.bounds[j] >= MIN_USERS
                                    for j in chosen)  # fmt: skip
    claimed = cands.score(chosen)
    assert claimed is not None
    # the floor: a share of the most useful start's records (its released plan's too)
    scores = [cands.score(s) for s in starts]
    planned = max(cands.planned(s) for s in starts)
    floor = refine_module.USEFUL_KEPT * max([planned, *(s.useful for s in scores if s)])
    kept = [s for s in scores if s is not None and s.useful >= floor]
    if kept:  # refined: at least the floor, useful + fine at least every such start's
        assert claimed.useful >= floor
        assert claimed.useful + claimed.fine >= max(s.useful + s.fine for s in kept)
    else:  # nothing to refine: the start whose released plan is the most useful
        assert sorted(chosen) in [sorted(s) for s in starts]
    # no allocation of these candidates makes more records useful than claimed
    users = np.concatenate([cands.occ.user[cands.occ.bounds[j] : cands.occ.bounds[j + 1]]
                            for j in chosen])  # fmt: skip
    cut = quanta(max(grids_per_user(users), 1), CAP, MAX_EPS)
    assert cut is not None
    assert claimed.useful <= _best_possible(cands, cut[0])
    # the plan released on the chosen cells: within the cap exactly, at least as useful
    occ = Occupancy.of(
        [cands.occ.user[cands.occ.bounds[j] : cands.occ.bounds[j + 1]] for j in chosen],
        [cands.occ.count[cands.occ.bounds[j] : cands.occ.bounds[j + 1]] for j in chosen],
    )
    plan = plan_for_intervals(occ, None, U, eps=None, cost_cap=CAP, max_epsilon=MAX_EPS,
                              n_statistics=1, useful_width=0.5 * U, rule=rule)  # fmt: skip
    charge: dict[int, Decimal] = {}
    for i in range(occ.bounds.size - 1):
        lo, hi = occ.bounds[i], occ.bounds[i + 1]
        for u in occ.user[lo:hi][plan.kept[lo:hi] > 0].tolist():
            charge[u] = charge.get(u, Decimal(0)) + plan.grid_eps(i).charged
    assert max(charge.values(), default=Decimal(0)) <= CAP
    widths = cell_widths(rule, occ, CAP, MAX_EPS)
    assert widths is not None
    eps_of = [plan.grid_eps(i) if plan.caps(occ, i).any() else None
              for i in range(occ.bounds.size - 1)]  # fmt: skip
    assert score(widths, plan.kept, eps_of)[0] >= claimed.useful


def test_these_instances_are_refined() -> None:
    """Most of the instances above split some start's cells (the checks are not vacuous)."""
    refined = 0
    for statistic in ("mean", "user_mean"):
        for seed in range(6):
            cands, starts = _starts(_tree(seed), statistic)
            refined += sorted(refine(cands, starts)) not in [sorted(s) for s in starts]
    assert refined >= 5


def test_from_the_finest_cells_only_merges_that_pay_are_taken() -> None:
    """With the start at the finest cells nothing splits; a cell is merged into its parent
    only when that raises useful + fine."""
    for seed in range(6):
        tree = _tree(seed)
        rule = _rule("user_mean")
        cands = Candidates.of([(0, tree)], min_users=1, rule=rule, cap=CAP, max_epsilon=MAX_EPS)
        finest = sorted(j for j, r in enumerate(cands.res.tolist()) if r == FINEST)
        got = refine(cands, [finest])
        start, end = cands.score(finest), cands.score(got)
        assert start is not None and end is not None
        assert got == finest or end.useful + end.fine > start.useful + start.fine
