"""The adaptive partition (docs/math.md §6.6) against brute force on small trees, and on
a real hour of CapMetrics when the shared data is present."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from app.core import expected_ci95_width
from app.core.planning.partition import adaptive_partition, narrowest_width

# A toy hierarchy: cell = 10·parent + digit; resolution = number of digits (root: 1 digit).
FINEST, COARSEST = 3, 1


def parent_of(cell: int, res: int) -> int:
    return int(str(cell)[:res])


def _occupancy(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    fine = [int(f"{a}{b}{c}") for a in (1, 2) for b in (1, 2, 3) for c in (1, 2)]
    rows = []
    for cell in fine:
        users = rng.choice(40, size=int(rng.integers(0, 14)), replace=False)
        rows += [(cell, int(u), int(rng.integers(1, 30))) for u in users]
    a = np.array(rows)
    return a[:, 0], a[:, 1], a[:, 2]


def _cell_worth(
    cells, users, counts, c, min_users, eps, useful, fine_weight, statistics=("mean",)
) -> float:
    """A released cell's worth (the module's formula), or -1 below ``min_users``; the
    width the widest of the statistics' (user_mean's by the per-grid public rule)."""
    res = len(str(c))
    rows = np.array([parent_of(int(f), res) == c for f in cells])
    per_user: dict[int, int] = {}
    for u, n in zip(users[rows].tolist(), counts[rows].tolist(), strict=True):
        per_user[u] = per_user.get(u, 0) + n
    if len(per_user) < min_users:
        return -1.0
    per = list(per_user.values())
    w = max(
        narrowest_width(per, 30.0, eps)
        if s != "user_mean"
        else expected_ci95_width("user_mean", per, 30.0, eps)
        for s in statistics
    )
    fineness = fine_weight * (res - COARSEST) / (FINEST - COARSEST)
    return sum(per_user.values()) * (1 + (w <= useful) + fineness)


def _candidates(cells: np.ndarray) -> list[int]:
    return sorted({parent_of(int(f), r) for f in cells for r in range(COARSEST, FINEST + 1)})


def _antichains(cells: np.ndarray) -> list[list[int]]:
    """Every set of cells on distinct ancestor chains (candidates: ancestors of fine
    cells): in each tree, nothing, its root alone, or one such set in each child's tree."""
    cand = _candidates(cells)
    children = {c: [d for d in cand if len(str(d)) > 1 and parent_of(d, len(str(c))) == c
                    and len(str(d)) == len(str(c)) + 1] for c in cand}  # fmt: skip

    def joined(options: list[list[list[int]]]) -> list[list[int]]:  # one set of each, joined
        return [list(itertools.chain(*pick)) for pick in itertools.product(*options)]

    def under(c: int) -> list[list[int]]:  # the non-empty sets in c's tree
        return [[c], *(s for s in joined([[[], *under(d)] for d in children[c]]) if s)]

    roots = [c for c in cand if len(str(c)) == COARSEST]
    return joined([[[], *under(r)] for r in roots])


@pytest.mark.parametrize(
    ("seed", "statistics", "eps", "useful"),
    [
        *((seed, ("mean",), 1.0, 9.0) for seed in range(3)),
        (0, ("user_mean",), 4.0, 9.0),  # the width only user_mean's
        (1, ("mean", "user_mean"), 4.0, 7.0),
    ],
)
def test_partition_is_the_best_disjoint_choice(
    seed: int, statistics: tuple[str, ...], eps: float, useful: float
) -> None:
    rng = np.random.default_rng(seed)
    cells, users, counts = _occupancy(rng)
    kw = {"min_users": 8, "eps": eps, "useful": useful, "fine_weight": 0.5}
    got = adaptive_partition(
        cells,
        users,
        counts,
        finest=FINEST,
        coarsest=COARSEST,
        min_users=8,
        U=30.0,
        eps=eps,
        parent_of=parent_of,
        useful_width=useful,
        statistics=statistics,
    )
    chosen = list(got.released)
    # disjoint, each fine cell in exactly one released ancestor, each released cell big enough
    for a, b in itertools.permutations(map(str, chosen), 2):
        assert not b.startswith(a)
    for f, c in got.cell_of.items():
        assert parent_of(f, got.released[c]) == c
    worth = {
        c: _cell_worth(cells, users, counts, c, statistics=statistics, **kw)
        for c in _candidates(cells)
    }
    allowed = (ch for ch in _antichains(cells) if all(worth[c] >= 0 for c in ch))
    best = max((sum(worth[c] for c in ch) for ch in allowed), default=0.0)
    assert sum(worth[c] for c in chosen) == pytest.approx(best)
    assert set(got.skipped) == set(cells.tolist()) - set(got.cell_of)


def test_shares_and_refusals() -> None:
    cells = np.array([111, 112, 121])
    users = np.array([1, 2, 3])
    counts = np.array([4, 5, 6])
    p = adaptive_partition(
        cells,
        users,
        counts,
        finest=3,
        coarsest=1,
        min_users=2,
        U=30.0,
        eps=1.0,
        parent_of=parent_of,
    )
    assert p.record_share == 1.0 and p.user_share == 1.0 and list(p.released) == [1]
    alone = adaptive_partition(
        cells,
        users,
        counts,
        finest=3,
        coarsest=1,
        min_users=4,
        U=30.0,
        eps=1.0,
        parent_of=parent_of,
    )
    assert alone.released == {} and alone.record_share == 0.0 and len(alone.skipped) == 3
    with pytest.raises(ValueError, match="positive count"):
        adaptive_partition(
            cells,
            users,
            np.array([1, 0, 1]),
            finest=3,
            coarsest=1,
            min_users=1,
            U=30.0,
            eps=1.0,
            parent_of=parent_of,
        )


DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "capmetrics" / "2017-03-16.csv"


def test_capmetrics_hour_keeps_its_records_in_disjoint_cells() -> None:
    if not DATA.is_file():
        pytest.skip(f"CapMetrics data absent ({DATA}): the shared folder is not beside the repo")
    from h3.api import basic_int as h3i

    from research.capmetrics import load_capmetrics

    day = load_capmetrics(DATA, drop_zero=False, resolution=8)
    slot = day.slots_us if hasattr(day, "slots_us") else None
    assert slot is not None
    first = np.unique(slot)[0]
    sel = slot == first
    key = np.stack([day.cells[sel], day.users[sel]], 1)
    rows, counts = np.unique(key, axis=0, return_counts=True)
    p = adaptive_partition(
        rows[:, 0],
        rows[:, 1],
        counts,
        finest=8,
        coarsest=5,
        min_users=10,
        U=30.0,
        eps=1.0,
        parent_of=h3i.cell_to_parent,
    )
    assert p.released and p.record_share > 0.5
    for a, b in itertools.combinations(p.released, 2):
        ra, rb = p.released[a], p.released[b]
        lo, hi = (a, b) if ra <= rb else (b, a)
        assert h3i.cell_to_parent(hi, min(ra, rb)) != lo  # no cell holds another
