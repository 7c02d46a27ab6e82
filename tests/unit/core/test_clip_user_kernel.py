"""The compiled Clip-User stages (app/core/planning/clip_user_kernel.py) take exactly the Python
loop's decisions: same removals in the same order, same K, same per-grid state, on small
random occupancies full of ties, on city-like ones with users in many grids, and on
ones where a user's grids change or get blocked between its visits (the kernel's cached
trial errors must then be recomputed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.data.occupancy import validate_occupancy
from app.core.planning.clip_user import clip_user
from app.core.planning.clip_user_greedy import suppress_users
from tests.unit.core.clip_user_reference import random_occupancy


def _both(g, u, c, U, eps, **kw):
    occ = validate_occupancy(g, u, c)
    fast = suppress_users(occ, U, eps, "half", compiled=True, **kw)
    slow = suppress_users(occ, U, eps, "half", compiled=False, **kw)
    return fast, slow


def city_occupancy(rng: np.random.Generator, n_users: int, n_grids: int, per_user: int):
    """Users each in up to ``per_user`` grids near a random start (grids share many users)."""
    rows = []
    for user in range(n_users):
        start = int(rng.integers(n_grids))
        k = int(rng.integers(1, per_user + 1))
        cells = np.unique((start + rng.integers(0, 3 * per_user, size=k)) % n_grids)
        counts = rng.integers(1, 6, size=cells.size)
        rows += [(int(gc), user, int(cc)) for gc, cc in zip(cells, counts, strict=True)]
    g, u, c = (np.array(col, dtype=np.int64) for col in zip(*rows, strict=True))
    return g, u, c


def mixed_occupancy(rng: np.random.Generator, n_users: int, n_busy: int, n_quiet: int):
    """Users in several of ``n_busy`` grids, each quiet grid held by two users only; counts
    1-3 (ties). Removals change busy grids between a user's visits and block quiet ones."""
    held = rng.random((n_users, n_busy)) < 0.4
    rows = [(int(gi), int(ui)) for ui, gi in zip(*np.nonzero(held), strict=True)]
    for q in range(n_quiet):
        a, b = rng.choice(n_users, size=2, replace=False)
        rows += [(n_busy + q, int(a)), (n_busy + q, int(b))]
    g, u = (np.array(col, dtype=np.int64) for col in zip(*rows, strict=True))
    return g, u, rng.integers(1, 4, size=g.size)


def revisits(g, u, c, removed_pos: list[int]) -> tuple[int, int]:
    """Visits (one per removal, in order) that found one of the user's kept grids changed
    since its previous visit, and those that found one blocked (down to one kept user)."""
    occ = validate_occupancy(g, u, c)
    rows = occ.order_u[np.asarray(removed_pos, dtype=np.int64)]
    kept: dict[int, set[int]] = {}
    for ui, gi in zip(occ.uinv.tolist(), occ.ginv.tolist(), strict=True):
        kept.setdefault(ui, set()).add(gi)
    nk = np.bincount(occ.ginv).tolist()
    last: dict[int, int] = {}
    done: list[tuple[int, int]] = []  # (grid, kept users left) per removal
    changed = blocked = 0
    pairs = zip(occ.uinv[rows].tolist(), occ.ginv[rows].tolist(), strict=True)
    for t, (ui, gi) in enumerate(pairs):
        if ui in last:
            between = [(h, k) for h, k in done[last[ui] + 1 : t] if h in kept[ui]]
            changed += bool(between)
            blocked += any(k == 1 for _, k in between)
        kept[ui].discard(gi)
        nk[gi] -= 1
        done.append((gi, nk[gi]))
        last[ui] = t
    return changed, blocked


@pytest.mark.parametrize("seed", range(6))
def test_compiled_stages_equal_the_python_loop_on_random_occupancies(seed: int) -> None:
    rng = np.random.default_rng(5000 + seed)
    removals = 0
    for _ in range(80):
        g, u, c = random_occupancy(rng)
        U = float(rng.choice([1.0, 2.0, 30.0, 65.0]))
        eps = float(rng.choice([0.1, 0.5, 1.0, 3.0, rng.uniform(0.01, 5)]))
        target = None
        if rng.random() < 0.3:
            target = clip_user(g, u, c, U, eps, pseudo_user=False).E * float(
                rng.choice([0.5, 0.9, 1.5, 3.0])
            )
        kw = {"error_target": target, "protect_min_error_grid": bool(rng.integers(0, 2))}
        fast, slow = _both(g, u, c, U, eps, **kw)
        assert fast == slow
        removals += bool(fast.removed_pos.size)
    assert removals > 10  # the cases do exercise suppression


@pytest.mark.parametrize(("eps", "protect"), [(0.1, False), (1.0, True), (0.3, False)])
def test_compiled_stages_equal_the_python_loop_on_city_like_occupancies(
    eps: float, protect: bool
) -> None:
    rng = np.random.default_rng(int(eps * 10) + protect)
    g, u, c = city_occupancy(rng, n_users=400, n_grids=60, per_user=12)
    fast, slow = _both(g, u, c, 30.0, eps, error_target=None, protect_min_error_grid=protect)
    assert fast == slow
    assert len(fast.removed_pos) > 50 and fast.K < fast.G1  # many stages ran


@pytest.mark.parametrize("protect", [False, True])
def test_compiled_stages_equal_the_python_loop_when_grids_change_between_visits(
    protect: bool,
) -> None:
    rng = np.random.default_rng(77 + protect)
    changed = blocked = 0
    for _ in range(12):
        g, u, c = mixed_occupancy(rng, n_users=40, n_busy=6, n_quiet=30)
        eps = float(rng.choice([0.1, 0.5, 2.0]))
        for target in (None, math.inf):
            kw = {"error_target": target, "protect_min_error_grid": protect}
            fast, slow = _both(g, u, c, 30.0, eps, **kw)
            assert fast == slow
            hits = revisits(g, u, c, fast.removed_pos)
            changed, blocked = changed + hits[0], blocked + hits[1]
    assert changed > 200 and blocked > 20  # the cached trials were often stale


def test_compiled_stages_equal_the_python_loop_with_counts_near_2_to_the_31() -> None:
    """The kernel keeps grid state as int32; its products (``s * s``) are int64."""
    rng = np.random.default_rng(31)
    for _ in range(10):
        g, u, c = mixed_occupancy(rng, n_users=12, n_busy=3, n_quiet=8)
        c = c * rng.integers(2**24, 2**25, size=c.size)  # grid totals stay below 2**31
        fast, slow = _both(g, u, c, 30.0, 1.0, error_target=math.inf, protect_min_error_grid=False)
        assert fast == slow and fast.removed_pos.size


def test_whole_plan_is_the_same_with_the_python_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """clip_user's plan (removals, m, errors) is unchanged by the compiled stages."""
    rng = np.random.default_rng(11)
    g, u, c = city_occupancy(rng, n_users=300, n_grids=40, per_user=8)
    fast = clip_user(g, u, c, 30.0, 0.5)
    import app.core.planning.clip_user as cu

    monkeypatch.setattr(
        cu, "suppress_users", lambda *a, **k: suppress_users(*a, **k, compiled=False)
    )
    assert clip_user(g, u, c, 30.0, 0.5) == fast


@pytest.mark.parametrize("seed", range(3))
def test_the_stages_kept_counts_equal_plan_kept(seed: int) -> None:
    """The planner's direct kept counts are plan_kept of the full plan, row for row."""
    from app.core.planning.clip_user import clip_user_suppressed, plan_kept

    rng = np.random.default_rng(900 + seed)
    for _ in range(40):
        g, u, c = random_occupancy(rng)
        kw = {"protect_min_error_grid": bool(rng.integers(0, 2)), "split": "half"}
        eps = float(rng.choice([0.1, 0.5, 2.0]))
        full = plan_kept(clip_user(g, u, c, 30.0, eps, **kw), g, u, c)
        assert np.array_equal(clip_user_suppressed(g, u, c, 30.0, eps, **kw).kept(), full)
    g, u, c = city_occupancy(rng, n_users=200, n_grids=30, per_user=6)
    assert np.array_equal(
        clip_user_suppressed(g, u, c, 30.0, 0.3).kept(),
        plan_kept(clip_user(g, u, c, 30.0, 0.3), g, u, c),
    )
