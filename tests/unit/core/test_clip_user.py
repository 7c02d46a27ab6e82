"""Clip-User (004 Alg. 1) and the pseudo-user step (004 eq. 15): fast vs reference.

The reference (``clip_user_reference.py``) recomputes every error from scratch for
every trial, following 004 Alg. 1 line by line. Hand-worked cases use ``U = 2`` so
``U² = 4`` and ``U²/4 = 1``.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from app.core.mechanisms.bounds import joint_clip_error
from app.core.planning.clip_user import clip_user, plan_kept
from app.core.planning.grid_errors import scalar_error_fn
from research.workloads import heavy_hitter_occupancy
from tests.unit.core.clip_user_reference import (
    assert_same,
    random_occupancy,
    reference_clip_user,
)


def test_inlined_error_matches_bounds_exactly():
    rng = np.random.default_rng(20240601)
    for split in ("half", "optimal"):
        for _ in range(3000):
            U = float(rng.choice([1.0, 2.0, 30.0, 65.0, rng.uniform(0.1, 100)]))
            eps = float(rng.choice([0.1, 0.5, 1.0, rng.uniform(0.01, 5)]))
            n = int(rng.integers(1, 400))
            s = int(rng.integers(1, n + 1))
            mx = int(rng.integers(1, s + 1))
            want = joint_clip_error(U, eps, mx, s, n, split=split)
            assert scalar_error_fn(U, eps, split)(mx, s, n) == want


# ------------------------------------------------------------- hand-worked


def test_hand_removal_tie_to_smallest_grid():
    # U = 2, eps = 2: eps/2 = 1, so E_g = E_mu + E_var + Δμ + ΔVar.
    # Grid 10: users 1..10, one record each (n = 10). Grid 20: users 1, 11..19 (n = 10).
    # Grid 30: user 100 has 6, users 101, 102 have 1 (n = 8).
    # Initial: grid 10/20: Δμ = 2·1/10 = 0.2, ΔVar = 4·1·9/100 = 0.36 (n > 2m*) -> 0.56.
    #          grid 30: Δμ = 2·6/8 = 1.5, ΔVar = U²/4 = 1 (n = 8 <= 12, even) -> 2.5 = E.
    # G₁ = 2 (user 1). Stage 1, L = [1]:
    #   remove 1 from grid 10: s = 9, Γ* = 1, n = 10: E_mu = 2(1 - 9/10) = 0.2,
    #   E_var = 4·9·1/100 = 0.36 (n <= 2s), Δμ = 2/9, ΔVar = 4·1·8/81 = 32/81
    #   -> 0.56 + 50/81 = 1.17728...; grid 20 gives the same: tie -> grid 10.
    #   1.177 <= 2.5, so remove (10, 1); now max G = 1, stop: K = 1.
    g = [10] * 10 + [20] * 10 + [30] * 3
    u = [*range(1, 11), 1, *range(11, 20), 100, 101, 102]
    c = [1] * 20 + [6, 1, 1]
    plan = clip_user(g, u, c, 2.0, 2.0)
    assert (plan.G1, plan.K) == (2, 1)
    assert pytest.approx(2.5) == plan.E
    assert plan.removed == ((10, 1),)
    assert plan.grid_errors[10] == pytest.approx(0.56 + 50 / 81)
    assert plan.grid_errors[20] == pytest.approx(0.56)
    assert plan.grid_errors[30] == pytest.approx(2.5)
    # Pseudo-user on grid 30 (Γ = 6, 1, 1; n = 8), s(m) = m + 2:
    #   m=1: s=3  1.25 + 1 (n > 2s, even) + 2/3 + 4·1·2/9       = 3.8056
    #   m=2: s=4  1    + 4·4·4/64 = 1     + 1   + 1 (s = 2m, even) = 4
    #   m=3: s=5  0.75 + 4·5·3/64 = 0.9375 + 6/5 + (1 - 1/25)      = 3.8475
    #   m=4: s=6  0.5  + 0.75              + 8/6 + 1                = 3.5833
    #   m=5: s=7  0.25 + 0.4375            + 10/7 + (1 - 1/49)      = 3.0957
    #   m=6: s=8  0 + 0 + 1.5 + 1                                   = 2.5   <- min
    # Grids 10 and 20 have all counts 1: m = 1. So Ē = 2.5.
    assert dict(plan.m) == {10: 1, 20: 1, 30: 6}
    assert plan.E_bar == pytest.approx(2.5)


def test_hand_protected_grid():
    # Same occupancy; grids 10 and 20 tie for the smallest initial E_g (0.56): the
    # protected one is grid 10 (smallest id), so user 1 is removed from grid 20.
    g = [10] * 10 + [20] * 10 + [30] * 3
    u = [*range(1, 11), 1, *range(11, 20), 100, 101, 102]
    c = [1] * 20 + [6, 1, 1]
    plan = clip_user(g, u, c, 2.0, 2.0, protect_min_error_grid=True)
    assert plan.removed == ((20, 1),)
    assert plan.K == 1


def test_hand_argmin_not_argmax_and_target():
    # U = 2, eps = 2. Grid 0: users 1, 2 with 2 each (n = 4); grid 1: user 1 with 1,
    # user 3 with 3 (n = 4).
    # Initial: grid 0: Δμ = 2·2/4 = 1, ΔVar = 1 (n <= 2m*, even) -> 2.
    #          grid 1: Δμ = 2·3/4 = 1.5, ΔVar = 1 -> 2.5 = E.
    # Trials for user 1: grid 0: s = 2, Γ* = 2: E_mu = 1, E_var = 4·2·2/16 = 1,
    #   Δμ = 2, ΔVar = 1 -> 5.  Grid 1: s = 3, Γ* = 3: E_mu = 0.5,
    #   E_var = 4·3·1/16 = 0.75, Δμ = 2, ΔVar = 1 - 1/9 (s odd) -> 4.1389.
    g, u, c = [0, 0, 1, 1], [1, 2, 1, 3], [2, 2, 1, 3]
    plan = clip_user(g, u, c, 2.0, 2.0)
    assert pytest.approx(2.5) == plan.E
    assert plan.removed == ()  # 4.1389 > 2.5: halt at once
    assert plan.K == plan.G1 == 2
    # With a target of 5 both trials are allowed; the argmin (grid 1) is taken, not
    # the argmax of 004 eq. 14 (grid 0).
    plan = clip_user(g, u, c, 2.0, 2.0, error_target=5.0)
    assert plan.removed == ((1, 1),)
    assert plan.K == 1
    assert plan.E == 5.0
    assert plan.grid_errors[1] == pytest.approx(0.5 + 0.75 + 2 + 8 / 9)
    # A target just below 4.1389 stops again.
    plan = clip_user(g, u, c, 2.0, 2.0, error_target=4.13)
    assert plan.removed == ()


def test_hand_partial_stage_keeps_earlier_removals():
    # U = 2, eps = 2. Grid 10: users 1..10 (1 each); grid 20: users 1, 11..19;
    # grid 40: users 2, 50 (1 each, n = 2). Users 1 and 2 occupy 2 grids each.
    # Target E = 1.5. Stage 1, L = [1, 2]:
    #   user 1: grids 10 and 20 both give 1.17728 (see above) -> remove (10, 1).
    #   user 2: grid 10 now has 9 users; without user 2: s = 8, n = 10:
    #     E_mu = 2(1 - 0.8) = 0.4, E_var = 4·8·2/100 = 0.64, Δμ = 2/8 = 0.25,
    #     ΔVar = 4·1·7/64 = 0.4375 -> 1.7275.
    #   grid 40 without user 2: s = 1, n = 2: E_mu = 1, E_var = 4·1·1/4 = 1, Δμ = 2,
    #     ΔVar = (1 - 1/1) = 0 -> 4.
    #   min = 1.7275 > 1.5: halt. User 2 keeps 2 grids, so K = 2, and the removal of
    #   user 1 made earlier in the stage stays (004 Alg. 1 line 14 resets only user 2).
    g = [10] * 10 + [20] * 10 + [40, 40]
    u = [*range(1, 11), 1, *range(11, 20), 2, 50]
    c = [1] * 22
    plan = clip_user(g, u, c, 2.0, 2.0, error_target=1.5)
    assert plan.removed == ((10, 1),)
    assert plan.K == 2
    # With target 1.75, user 2 goes too (from grid 10, 1.7275 < 4): K = 1.
    plan = clip_user(g, u, c, 2.0, 2.0, error_target=1.75)
    assert plan.removed == ((10, 1), (10, 2))
    assert plan.K == 1
    assert plan.grid_errors[10] == pytest.approx(1.7275)


def test_hand_never_empty_a_grid():
    # U = 2, eps = 2. User 1 alone in grid 0 (1 record) and with user 2 in grid 1.
    # Grid 0 is blocked (removing user 1 would empty it). Grid 1 without user 1:
    # s = 1, n = 2 -> E_mu = 1, E_var = 1, Δμ = 2, ΔVar = 0 -> 4.
    # Initial: grid 0: Δμ = 2, ΔVar = (1/4)(1 - 1/1)·4 = 0 -> 2; grid 1: 1 + 1 = 2.
    g, u, c = [0, 1, 1], [1, 1, 2], [1, 1, 1]
    assert clip_user(g, u, c, 2.0, 2.0).removed == ()  # 4 > 2
    plan = clip_user(g, u, c, 2.0, 2.0, error_target=10.0)
    assert plan.removed == ((1, 1),)
    assert plan.K == 1
    # User 1 alone in both grids: no candidate at all, even with an infinite target.
    plan = clip_user([0, 1], [1, 1], [1, 1], 2.0, 2.0, error_target=math.inf)
    assert plan.removed == ()
    assert plan.K == 2


def test_hand_pseudo_user_interior_choice():
    # U = 2, eps = 0.2 (eps/2 = 0.1: noise terms are 10·Δ). One grid: counts 3, 1, 1
    # (n = 5).
    #   m=3: s=5: 0 + 0 + 10·(2·3/5) + 10·(1 - 1/25)      = 12 + 9.6          = 21.6
    #   m=2: s=4: 2(1-4/5) + 4·4·1/25 + 10·(4/4) + 10·1   = 0.4 + 0.64 + 20   = 21.04
    #   m=1: s=3: 2(1-3/5) + 4·3·2/25 + 10·(2/3) + 10·8/9 = 0.8 + 0.96 + 140/9 = 17.3156
    plan = clip_user([7, 7, 7], [1, 2, 3], [3, 1, 1], 2.0, 0.2)
    assert plan.G1 == plan.K == 1
    assert plan.m[7] == 1
    assert pytest.approx(21.6) == plan.E
    assert plan.E_bar == pytest.approx(1.76 + 140 / 9)
    assert plan.grid_errors[7] == pytest.approx(21.6)
    assert plan_kept(plan, [7, 7, 7], [1, 2, 3], [3, 1, 1]).tolist() == [1, 1, 1]
    off = clip_user([7, 7, 7], [1, 2, 3], [3, 1, 1], 2.0, 0.2, pseudo_user=False)
    assert off.m[7] == 3
    assert off.E_bar == pytest.approx(21.6)


# ------------------------------------------------------- fast == reference


@pytest.mark.parametrize("seed", range(8))
def test_fast_equals_reference_on_random_occupancies(seed):
    rng = np.random.default_rng(1000 + seed)
    removals = halts_midway = 0
    for _ in range(60):
        g, u, c = random_occupancy(rng)
        U = float(rng.choice([1.0, 2.0, 65.0]))
        eps = float(rng.choice([0.1, 0.5, 1.0, 3.0]))
        split = str(rng.choice(["half", "optimal"]))
        protect = bool(rng.integers(0, 2))
        target = None
        if rng.random() < 0.3:
            base = clip_user(g, u, c, U, eps, split=split, pseudo_user=False).E
            target = base * float(rng.choice([0.5, 0.9, 1.5, 3.0]))
        kw = {"error_target": target, "protect_min_error_grid": protect, "split": split}
        plan = clip_user(g, u, c, U, eps, **kw)
        ref = reference_clip_user(g, u, c, U, eps, **kw)
        assert_same(plan, ref)
        off = clip_user(g, u, c, U, eps, pseudo_user=False, **kw)
        assert_same(off, reference_clip_user(g, u, c, U, eps, pseudo_user=False, **kw))
        removals += bool(plan.removed)
        halts_midway += 1 < plan.K < plan.G1
    assert removals > 5  # the random cases do exercise suppression


def test_fast_equals_reference_on_heavy_hitters():
    rng = np.random.default_rng(7)
    for gamma, G, eps in [(3, 6, 0.3), (9, 7, 1.0), (6, 6, 0.1)]:
        g, u, c = heavy_hitter_occupancy(gamma, rng, G=G, q=0.05)
        for protect in (False, True):
            kw = {"protect_min_error_grid": protect}
            assert_same(
                clip_user(g, u, c, 65.0, eps, **kw), reference_clip_user(g, u, c, 65.0, eps, **kw)
            )


def test_fast_equals_reference_on_dense_ties():
    # Many equal counts: stresses the multiplicity of the largest count and the
    # second-largest pointer.
    rng = np.random.default_rng(99)
    for _ in range(40):
        n_grids, n_users = int(rng.integers(2, 6)), int(rng.integers(3, 12))
        ui, gi = np.nonzero(rng.random((n_users, n_grids)) < 0.8)
        c = rng.integers(1, 3, size=ui.size) * int(rng.choice([1, 5]))
        for target in (None, 1e9):
            kw = {"error_target": target}
            assert_same(
                clip_user(gi, ui, c, 65.0, 0.5, **kw),
                reference_clip_user(gi, ui, c, 65.0, 0.5, **kw),
            )


# -------------------------------------------------------------- invariants


@pytest.mark.parametrize("seed", range(4))
def test_plan_invariants_and_budget(seed):
    rng = np.random.default_rng(500 + seed)
    for _ in range(25):
        g, u, c = random_occupancy(rng)
        eps = float(rng.choice([0.1, 1.0]))
        plan = clip_user(g, u, c, 65.0, eps)
        kept = plan_kept(plan, g, u, c)
        removed = set(plan.removed)
        want = [
            0 if (a, b) in removed else min(k, plan.m[a])
            for a, b, k in zip(g.tolist(), u.tolist(), c.tolist(), strict=True)
        ]
        assert kept.tolist() == want
        assert kept.shape == c.shape and np.all(kept >= 0) and np.all(kept <= c)
        # Charging eps per grid where a user is kept never exceeds K·eps.
        per_user = defaultdict(int)
        for uu, k in zip(u.tolist(), kept.tolist(), strict=True):
            per_user[uu] += k > 0
        assert max(per_user.values()) == plan.K <= plan.G1
        # Every grid keeps a user; m_g within [Γ_*, Γ*]; errors within E.
        for gid in set(g.tolist()):
            rows = (g == gid) & (kept > 0)
            assert rows.any()
            rem = {b for a, b in plan.removed if a == gid}
            rows = (g == gid) & ~np.isin(u, list(rem))
            gam = c[rows]
            assert gam.min() <= plan.m[gid] <= gam.max()
            assert plan.grid_errors[gid] <= plan.E
            assert plan.grid_errors_bar[gid] <= plan.grid_errors[gid]
        assert plan.E_bar <= max(plan.grid_errors.values()) <= plan.E
        assert len(set(plan.removed)) == len(plan.removed)


def test_row_order_and_id_relabelling_do_not_matter():
    rng = np.random.default_rng(3)
    for _ in range(20):
        g, u, c = random_occupancy(rng)
        plan = clip_user(g, u, c, 65.0, 0.3)
        perm = rng.permutation(g.size)
        again = clip_user(g[perm], u[perm], c[perm], 65.0, 0.3)
        assert again == plan
        # An increasing relabelling of ids keeps every order, so the plan maps over.
        shifted = clip_user(3 * g + 5, 2 * u + 1, c, 65.0, 0.3)
        assert shifted.removed == tuple((3 * a + 5, 2 * b + 1) for a, b in plan.removed)
        assert shifted.K == plan.K and shifted.E_bar == plan.E_bar


def test_plan_kept_marks_removed_pairs():
    g = [10] * 10 + [20] * 10 + [30] * 3
    u = [*range(1, 11), 1, *range(11, 20), 100, 101, 102]
    c = [1] * 20 + [6, 1, 1]
    plan = clip_user(g, u, c, 2.0, 2.0)
    kept = plan_kept(plan, g, u, c)
    assert kept[0] == 0  # (10, 1) was removed
    assert kept.sum() == sum(c) - 1
    with pytest.raises(ValueError, match="not part of the plan"):
        plan_kept(plan, [99], [1], [1])


def test_large_occupancy_runs_and_respects_budget():
    rng = np.random.default_rng(11)
    n_users, n_grids = 3000, 40
    k = rng.integers(1, 12, size=n_users)
    g = np.concatenate([rng.choice(n_grids, size=kk, replace=False) for kk in k])
    u = np.repeat(np.arange(n_users), k)
    c = rng.geometric(0.05, size=g.size)
    plan = clip_user(g, u, c, 65.0, 0.2)
    kept = plan_kept(plan, g, u, c)
    per_user = np.bincount(u[kept > 0], minlength=n_users)
    assert per_user.max() == plan.K < plan.G1
    assert len(plan.removed) > 0


# -------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("args", "kw", "match"),
    [
        (([0, 0], [1, 1], [1, 2]), {}, "duplicate"),
        (([0], [1], [0]), {}, "count"),
        (([-1], [1], [1]), {}, "non-negative"),
        (([0], [-3], [1]), {}, "non-negative"),
        (([0, 1], [1], [1]), {}, "same length"),
        (([], [], []), {}, "empty"),
        (([0.5], [1], [1]), {}, "integers"),
        (([0], [1], [1]), {"error_target": float("nan")}, "error_target"),
        (([0], [1], [1]), {"error_target": -1.0}, "error_target"),
        (([0], [1], [1]), {"split": "thirds"}, "split"),
    ],
)
def test_validation(args, kw, match):
    with pytest.raises(ValueError, match=match):
        clip_user(*args, 65.0, 1.0, **kw)


@pytest.mark.parametrize(
    ("U", "eps"),
    [(0.0, 1.0), (-1.0, 1.0), (65.0, 0.0), (65.0, math.nan), (65.0, math.inf), (math.inf, 1.0)],
)
def test_validation_of_U_and_eps(U, eps):
    with pytest.raises(ValueError, match="must be finite and > 0"):
        clip_user([0], [1], [1], U, eps)


def test_integral_float_ids_are_accepted():
    a = clip_user([0.0, 1.0], [2.0, 2.0], [3.0, 4.0], 65.0, 1.0)
    b = clip_user([0, 1], [2, 2], [3, 4], 65.0, 1.0)
    assert a == b
