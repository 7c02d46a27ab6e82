"""A reference Clip-User (004 Alg. 1) and the pseudo-user step (004 eq. 15), every error
recomputed from scratch with ``bounds.joint_clip_error`` for every trial, following
Alg. 1 line by line as read in ``app/core/planning/clip_user.py`` (docs/math.md §6.2); and
random occupancies to compare it with (test_clip_user.py, test_clip_user_kernel.py)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from app.core.mechanisms.bounds import joint_clip_error
from app.core.planning.clip_user import ClipUserPlan


def reference_clip_user(
    grids,
    users,
    counts,
    U,
    eps,
    *,
    error_target=None,
    protect_min_error_grid=False,
    split="half",
    pseudo_user=True,
):
    """Obviously-correct Clip-User: recompute each E_g from the kept counts."""
    U, eps = float(U), float(eps)
    m = {(int(g), int(u)): int(c) for g, u, c in zip(grids, users, counts, strict=True)}
    kept = dict(m)
    users_in = defaultdict(set)
    grids_of = defaultdict(set)
    for g, u in m:
        users_in[g].add(u)
        grids_of[u].add(g)
    n = {g: sum(m[g, u] for u in us) for g, us in users_in.items()}

    def err(g, gammas):
        vals = [v for v in gammas if v > 0]
        return joint_clip_error(U, eps, max(vals), sum(vals), n[g], split=split)

    init = {g: err(g, [m[g, u] for u in users_in[g]]) for g in users_in}
    E = max(init.values()) if error_target is None else float(error_target)
    protected = min(init, key=lambda g: (init[g], g)) if protect_min_error_grid else None
    G1 = max(len(gs) for gs in grids_of.values())
    removed = []
    while True:
        level = max(len(grids_of[u]) for u in grids_of)
        if level <= 1:
            break
        stage = sorted(u for u in grids_of if len(grids_of[u]) == level)
        halted = False
        for u in stage:
            best = None
            for g in sorted(grids_of[u]):
                if g == protected:
                    continue
                others = [kept[g, v] for v in users_in[g] if v != u and kept[g, v] > 0]
                if not others:  # would empty the grid
                    continue
                e = err(g, others)
                if best is None or e < best[0]:
                    best = (e, g)
            if best is None or best[0] > E:
                halted = True
                break
            g = best[1]
            kept[g, u] = 0
            grids_of[u].discard(g)
            removed.append((g, u))
        if halted:
            break
    K = max(len(gs) for gs in grids_of.values())

    grid_errors, m_g, errors_bar = {}, {}, {}
    for g in sorted(users_in):
        gam = [kept[g, u] for u in users_in[g] if kept[g, u] > 0]
        grid_errors[g] = err(g, gam)
        if not pseudo_user:
            m_g[g], errors_bar[g] = max(gam), grid_errors[g]
            continue
        best = None
        for mm in range(min(gam), max(gam) + 1):
            e = joint_clip_error(U, eps, mm, sum(min(x, mm) for x in gam), n[g], split=split)
            if best is None or e < best[0]:
                best = (e, mm)
        errors_bar[g], m_g[g] = best
    return {
        "G1": G1,
        "K": K,
        "E": E,
        "E_bar": max(errors_bar.values()),
        "removed": tuple(removed),
        "m": m_g,
        "grid_errors": grid_errors,
        "grid_errors_bar": errors_bar,
    }


def assert_same(plan: ClipUserPlan, ref: dict) -> None:
    assert ref["G1"] == plan.G1
    assert ref["K"] == plan.K
    assert ref["E"] == plan.E
    assert plan.removed == ref["removed"]
    assert dict(plan.m) == ref["m"]
    assert dict(plan.grid_errors) == ref["grid_errors"]
    assert dict(plan.grid_errors_bar) == ref["grid_errors_bar"]
    assert plan.E_bar == ref["E_bar"]


def random_occupancy(rng: np.random.Generator):
    """A small random occupancy with arbitrary ids, shuffled rows and many ties."""
    n_grids = int(rng.integers(1, 7))
    n_users = int(rng.integers(1, 9))
    grid_ids = rng.choice(1000, size=n_grids, replace=False)
    user_ids = rng.choice(1000, size=n_users, replace=False)
    occ = rng.random((n_users, n_grids)) < rng.uniform(0.3, 1.0)
    occ[np.arange(n_users), rng.integers(0, n_grids, n_users)] = True  # every user somewhere
    ui, gi = np.nonzero(occ)
    kind = rng.integers(0, 3)
    if kind == 0:
        counts = rng.integers(1, 4, size=ui.size)  # many ties
    elif kind == 1:
        counts = rng.geometric(0.2, size=ui.size)
    else:
        counts = rng.integers(1, 4, size=ui.size)
        counts[rng.random(ui.size) < 0.3] *= 10  # heavy hitters
    perm = rng.permutation(ui.size)
    return grid_ids[gi][perm], user_ids[ui][perm], counts[perm]


# ------------------------------------------------------------- error formula
