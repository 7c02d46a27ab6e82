"""An adaptive partition chosen with its per-cell allocation (docs/math.md §6.10).

Every node of a span's partition trees (``app.core.planning.partition``) with at least
``min_users`` units is a candidate cell. A partition (disjoint candidates) is scored by the
allocation its plan would make: the per-cell weights of ``app.releases.per_cell`` with
every unit kept (each cell's need, read once per candidate, then :func:`allocate`), giving
its useful records and its fine records (:func:`fine_worth`). From each given partition
with at least ``USEFUL_KEPT`` of the most useful one's useful records, cells are split into
their candidate children while the fine records grow, useful + fine does not fall and the
useful records stay above that floor, and groups of cells are merged back into a parent when
that raises useful + fine; the result with the most useful + fine is chosen.
Public information only: occupancy, ``U``, ``C``,
``max_epsilon``, ``min_users`` and the widths' rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np

from app.core.planning.partition import PartitionTree
from app.releases.interval_plan import plan_for_intervals
from app.releases.per_cell import (
    CellWidths,
    WidthRule,
    allocate,
    cell_widths,
    cut,
    need_of,
    quanta,
    score,
)
from app.releases.planning import Occupancy, grids_per_user

#: Refined, a partition keeps at least this share of the most useful start's useful records.
USEFUL_KEPT = 0.84
#: Passes over the released cells (each may split every cell once).
PASSES = 8
#: The floor is also read from the released plan of this many of the most useful starts.
PLANNED = 2
#: On top of the finer half's 1, a record is worth this times its share of the levels.
FINE_SLOPE = 0.1

Key = tuple[int, int]  # (slot µs, cell)


@dataclass(frozen=True)
class Score:
    useful: float  # records in cells the allocation makes useful
    fine: float  # released records, each worth :func:`fine_worth`


@dataclass
class Candidates:
    """The candidate cells of the trees, as the grids of one occupancy."""

    keys: list[Key]
    res: np.ndarray
    records: np.ndarray
    children: list[list[int]]
    occ: Occupancy
    widths: CellWidths
    cap: Decimal
    max_epsilon: Decimal
    fineness: np.ndarray
    parent: list[int] = field(default_factory=list)  # -1: none among the candidates
    _needs: dict[tuple[int, int], int] = field(default_factory=dict)
    _below: dict[int, frozenset[int]] = field(default_factory=dict)
    _scores: dict[tuple[int, ...], Score | None] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        slots: list[tuple[int, PartitionTree]],
        *,
        min_users: int,
        rule: WidthRule,
        cap: Decimal,
        max_epsilon: Decimal,
    ) -> Candidates:
        keys: list[Key] = []
        res, users, counts = [], [], []
        coarsest = finest = 0
        for slot, tree in slots:
            coarsest, finest = tree.coarsest, tree.finest
            for cell, node in tree.nodes.items():
                if node.counts.size >= min_users:
                    keys.append((slot, cell))
                    res.append(node.res)
                    users.append(node.users)
                    counts.append(node.counts)
        index = {k: i for i, k in enumerate(keys)}
        trees = dict(slots)
        children = [
            [index[(s, c)] for c in trees[s].nodes[cell].children if (s, c) in index]
            for s, cell in keys
        ]
        occ = Occupancy.of(users, counts)
        records = np.add.reduceat(occ.count, occ.bounds[:-1]) if keys else np.zeros(0)
        fineness = fine_worth(np.array(res, dtype=np.int64), coarsest, finest)
        widths = CellWidths(rule, occ, float(min(cap, max_epsilon)))
        return cls(
            keys,
            np.array(res, dtype=np.int64),
            records,
            children,
            occ,
            widths,
            cap,
            max_epsilon,
            fineness,
        )

    def __post_init__(self) -> None:
        self.parent = [-1] * len(self.keys)
        for p, kids in enumerate(self.children):
            for k in kids:
                self.parent[k] = p

    def below(self, p: int) -> frozenset[int]:
        """The candidates strictly below candidate ``p`` (cached)."""
        got = self._below.get(p)
        if got is None:
            got = frozenset(c for k in self.children[p] for c in (k, *self.below(k)))
            self._below[p] = got
        return got

    def need(self, j: int, Q: int) -> int:
        """Candidate ``j``'s need in quanta of ``per_part(C, Q)``, every unit kept (0: none)."""
        got = self._needs.get((j, Q))
        if got is None:
            q_top = cut(Q, self.cap, self.max_epsilon)
            lo, hi = int(self.occ.bounds[j]), int(self.occ.bounds[j + 1])
            caps = self.occ.count[lo:hi]
            got = self._needs[(j, Q)] = (
                0 if q_top is None else need_of(self.widths, j, caps, *q_top)
            )
        return got

    def occupancy(self, part: list[int]) -> Occupancy:
        """The occupancy of the partition ``part`` (its cells in that order)."""
        bounds = self.occ.bounds
        return Occupancy.of(
            [self.occ.user[bounds[j] : bounds[j + 1]] for j in part],
            [self.occ.count[bounds[j] : bounds[j + 1]] for j in part],
        )

    def planned(self, part: list[int]) -> float:
        """The useful records of the plan §6.7 releases on ``part`` (the best-scoring one)."""
        occ = self.occupancy(part)
        rule = self.widths.rule
        widths = cell_widths(rule, occ, self.cap, self.max_epsilon)
        if widths is None:
            got = self.score(part)
            return 0.0 if got is None else got.useful
        plan = plan_for_intervals(occ, None, rule.U, eps=None, cost_cap=self.cap,
                                  max_epsilon=self.max_epsilon, n_statistics=len(rule.statistics),
                                  useful_width=rule.useful_width, rule=rule)  # fmt: skip
        eps = [plan.grid_eps(i) if plan.caps(occ, i).any() else None for i in range(len(part))]
        return float(score(widths, plan.kept, eps)[0])

    def score(self, part: list[int]) -> Score | None:
        """The useful and fine records of the partition ``part`` (sorted) under its
        allocation keeping every unit (None: no quantum large enough); cached."""
        key = tuple(part)
        if key not in self._scores:
            self._scores[key] = self._score(part)
        return self._scores[key]

    def _score(self, part: list[int]) -> Score | None:
        occ = self.occupancy(part)
        cut = quanta(max(grids_per_user(occ.user), 1), self.cap, self.max_epsilon)
        if cut is None:
            return None
        Q, _, top = cut
        need = np.array([self.need(j, Q) for j in part], dtype=np.int64)
        weights, _ = allocate(occ, occ.count, need, Q, top)
        idx = np.array(part, dtype=np.int64)
        useful = (need > 0) & (weights >= need)
        records = self.records[idx]
        released = weights > 0
        return Score(
            float(records[useful].sum()), float((records * self.fineness[idx])[released].sum())
        )


def fine_worth(res: np.ndarray, coarsest: int, finest: int) -> np.ndarray:
    """What a released record is worth to the search: 1 in the finer half of the
    resolutions asked (``(res - coarsest)/(finest - coarsest) >= 1/2``), else 0, plus
    ``FINE_SLOPE`` times that share (finer is better at every level)."""
    share = (res - coarsest) / max(finest - coarsest, 1)
    out: np.ndarray = (share >= 0.5) + FINE_SLOPE * share
    return out


def refine(cands: Candidates, starts: list[list[int]]) -> list[int]:
    """The partition of the module docstring from ``starts`` (candidate indices each)."""
    unique = [list(p) for p in sorted({tuple(sorted(p)) for p in starts})]
    if not unique:
        return []
    scored = [(got, p) for p in unique if (got := cands.score(p)) is not None]
    most = sorted(scored, key=lambda t: -t[0].useful)[:PLANNED]  # the released plan's too
    planned = [(cands.planned(p), p) for _, p in most] or [(cands.planned(unique[0]), unique[0])]
    top = max(planned, key=lambda t: t[0])
    floor = USEFUL_KEPT * max([top[0], *(got.useful for got, _ in scored)])
    out: list[tuple[float, float, list[int]]] = []
    for got, p in scored:
        if got.useful >= floor:
            best, cur = _greedy(cands, p, got, floor)
            out.append((best.fine, best.useful, cur))
    return max(out, key=lambda t: (t[1] + t[0], t[0]))[2] if out else top[1]


def _greedy(
    cands: Candidates, cur: list[int], best: Score, floor: float
) -> tuple[Score, list[int]]:
    """Each pass tries every split of ``cur``'s cells, then takes them (each scored again)
    in order of fine records gained per useful record lost (none lost first; ties: the
    finer cell first) while :func:`_worth`; then merges back under a parent every group of
    cells whose merge raises useful + fine; until a pass changes nothing."""
    for _ in range(PASSES):
        moves = []
        for j in cur:
            if not cands.children[j]:
                continue
            got = cands.score(_split(cur, j, cands))
            if got is None or not _worth(got, best, floor):
                continue
            lost = best.useful - got.useful
            gain = got.fine - best.fine
            moves.append((lost > 0, -gain / max(lost, 1.0), -cands.res[j], j))
        changed = False
        for *_, j in sorted(moves):
            if j not in cur:
                continue
            trial = _split(cur, j, cands)
            got = cands.score(trial)
            if got is not None and _worth(got, best, floor):
                cur, best, changed = trial, got, True
        for p in sorted({cands.parent[j] for j in cur if cands.parent[j] >= 0}):
            below = [i for i in cur if i in cands.below(p)]
            if not below:  # p lies under a cell merged in this pass
                continue
            trial = sorted([i for i in cur if i not in below] + [p])
            got = cands.score(trial)
            if (
                got is not None
                and got.useful >= floor
                and got.useful + got.fine > best.useful + best.fine
            ):
                cur, best, changed = trial, got, True
        if not changed:
            break
    return best, cur


def _worth(got: Score, best: Score, floor: float) -> bool:
    """Whether ``got`` may replace ``best``: finer, no less useful + fine, above the floor."""
    return (
        got.fine > best.fine
        and got.useful + got.fine >= best.useful + best.fine
        and got.useful >= floor
    )


def _split(part: list[int], j: int, cands: Candidates) -> list[int]:
    return sorted([i for i in part if i != j] + cands.children[j])
