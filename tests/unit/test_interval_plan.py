"""Plans for useful intervals (docs/math.md §6.7) against brute force on small occupancies."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from app.core.data.counts import prepare_counts
from app.core.mechanisms.mean_capped import capped_half_widths
from app.core.planning.partition import narrowest_width
from app.releases.interval_plan import (
    candidate_ks,
    interval_score,
    plan_for_intervals,
    top_k_kept,
)
from app.releases.planning import Occupancy

U = 30.0


def _occupancy(rng: np.random.Generator, grids: int = 5, users: int = 12) -> Occupancy:
    ids, counts = [], []
    for _ in range(grids):
        who = np.sort(rng.choice(users, size=int(rng.integers(2, users)), replace=False))
        ids.append(who.astype(np.int64))
        counts.append(rng.integers(1, 9, size=who.size).astype(np.int64))
    return Occupancy.of(ids, counts)


@pytest.mark.parametrize("seed", range(20))
def test_top_k_keeps_each_user_in_its_k_largest_shares(seed: int) -> None:
    rng = np.random.default_rng(seed)
    occ = _occupancy(rng)
    records = np.bincount(occ.grid, weights=occ.count)
    live = rng.random(occ.user.size) > 0.1
    for k in (1, 2, 3, 5):
        kept = top_k_kept(occ, live, k)
        for user in np.unique(occ.user):
            rows = [i for i in range(occ.user.size) if occ.user[i] == user and live[i]]
            # brute force: sort this user's grids by (share desc, grid asc), keep k
            rows.sort(key=lambda i: (-occ.count[i] / records[occ.grid[i]], occ.grid[i]))
            want = set(rows[:k])
            for i in range(occ.user.size):
                if occ.user[i] != user:
                    continue
                assert kept[i] == (occ.count[i] if i in want else 0)


def test_a_suppressed_user_widens_the_interval_by_its_share() -> None:
    counts = np.array([5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 20])
    whole = narrowest_width(counts, U, 1.0)
    caps = counts.copy()
    caps[-1] = 0
    without = narrowest_width(counts, U, 1.0, caps=caps)
    assert without > whole
    # brute force over every cap k of the capped_weights mechanism on the kept users
    info = prepare_counts(counts, caps)
    ks = np.arange(1, 21)
    assert without == pytest.approx(min(U, 2 * float(capped_half_widths(info, U, 1.0, ks).min())))


@pytest.mark.parametrize("seed", range(8))
def test_the_plan_is_the_best_candidate_and_charges_at_most_the_cap(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    occ = _occupancy(rng, grids=6, users=10)
    cap = Decimal("2")
    none = None
    plan = plan_for_intervals(
        occ, none, U, eps=None, cost_cap=cap, max_epsilon=Decimal(10), n_statistics=1
    )
    assert plan.max_cost <= cap
    _, grids = plan.user_costs(occ)
    assert (grids * plan.eps.charged <= cap).all()
    assert plan.eps.used <= float(plan.eps.charged)
    # every candidate k, scored again here: none scores better than the plan's
    live = np.ones(occ.user.size, dtype=bool)
    G1 = int(np.unique(occ.user, return_counts=True)[1].max())
    mine = interval_score(occ, plan.kept, U, plan.eps.used, 0.2 * U)
    assert candidate_ks(G1)[-1] == G1
    for k in candidate_ks(G1):
        other = interval_score(occ, top_k_kept(occ, live, k), U, float(cap / k), 0.2 * U)
        assert other[0] <= mine[0]
        if other[0] == mine[0]:
            assert other[1] <= mine[1] + 1e-9


def test_with_epsilon_given_nobody_is_suppressed() -> None:
    occ = _occupancy(np.random.default_rng(5))
    from app.answers.epsilon import parse_epsilon

    plan = plan_for_intervals(
        occ,
        None,
        U,
        eps=parse_epsilon(0.5),
        cost_cap=None,
        max_epsilon=Decimal(10),
        n_statistics=2,
    )
    assert (plan.kept == occ.count).all() and plan.K == plan.G1


def test_candidates_cover_small_k_and_reach_g1() -> None:
    for G1 in range(1, 60):
        ks = candidate_ks(G1)
        assert ks[: min(G1, 8)] == list(range(1, min(G1, 8) + 1))
        assert ks[-1] == G1 and ks == sorted(set(ks))
