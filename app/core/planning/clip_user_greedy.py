"""The greedy suppression loop of Clip-User (004 Alg. 1 lines 5–19, docs/math.md §6.2, §6.4).

:func:`suppress_users` runs the stages of Alg. 1 as read in :mod:`app.core.planning.clip_user`
(its module docstring) on a checked :class:`~app.core.data.occupancy.Occupancy`.

Efficiency (docs/math.md §6.4): each grid keeps ``ΣΓ``, its kept-user count and its largest
and second-largest kept counts (with the multiplicity of the largest) in flat
Python lists, with the grid's distinct counts sorted once and two pointers that
only move forward. A trial removal is then O(1) and an actual removal amortised
O(1). A user is visited at most ``G_l - 1`` times (once per stage it takes part
in), each visit scanning its ``G_l`` original pairs, so the whole of Alg. 1 costs
O(Σ_l G_l²) elementary steps plus O(P log P) numpy preparation for ``P`` pairs:
linear in the number of (user, grid) pairs when each user occupies a bounded
number of grids, never the product users × grids. The trial error is 004 eq. 13 with
exactly the float operations of ``bounds.joint_clip_error``
(:mod:`app.core.planning.grid_errors`), so the fast loop and a from-scratch reference
take the same decisions, ties included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app.core.data.occupancy import Occupancy, unique_inverse
from app.core.mechanisms.bounds import joint_clip_errors
from app.core.planning.clip_user_kernel import greedy_half
from app.core.planning.grid_errors import scalar_error_fn

__all__ = ["GreedyPrep", "Suppression", "greedy_prep", "suppress_users"]


@dataclass(frozen=True, slots=True)
class Suppression:
    """Outcome of the greedy loop.

    Attributes:
        G1: most grids any user occupies before any removal (004 Cor. II.1).
        K: most grids any user occupies after the removals.
        E: the error threshold used (004 eq. 12, or the caller's target).
        removed_pos: removed pairs as positions in ``Occupancy.order_u``, in removal order.
        kept_total: per grid, ``ΣΓ`` after the removals.
        kept_max: per grid, the largest kept count ``Γ*`` after the removals.
    """

    G1: int
    K: int
    E: float
    removed_pos: np.ndarray  # int64 (a day's plan removes 10⁶: never a list)
    kept_total: np.ndarray
    kept_max: np.ndarray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Suppression):
            return NotImplemented
        same = (self.G1, self.K, self.E) == (other.G1, other.K, other.E)
        return same and all(
            np.array_equal(getattr(self, f), getattr(other, f))
            for f in ("removed_pos", "kept_total", "kept_max")
        )


@dataclass(frozen=True, slots=True)
class GreedyPrep:
    """What the stages read of a checked occupancy whatever ``ε``, ``U`` and the target
    (docs/math.md §6.4): per grid its distinct counts in descending order with their
    multiplicities (flat: ``dval``/``dmult``, grid ``g`` at ``gfirst[g]:gend[g]``), the
    next distinct count ``p2``/``top2`` and its user count ``NK``; per user its grid
    count ``Gl`` and its pairs' start ``ustart`` in the rows sorted by (user, grid),
    whose grid, count and distinct-count index are ``pg``, ``pm``, ``pd``. Read only:
    the stages work on copies of what they change. Made once per occupancy
    (:func:`greedy_prep`): a search over ``ε`` plans one occupancy many times."""

    dval: np.ndarray
    dmult: np.ndarray
    gfirst: np.ndarray
    gend: np.ndarray
    p2: np.ndarray
    top2: np.ndarray
    NK: np.ndarray
    Gl: np.ndarray
    ustart: np.ndarray
    G1: int
    pg: np.ndarray
    pm: np.ndarray
    pd: np.ndarray


def greedy_prep(occ: Occupancy) -> GreedyPrep:
    """:class:`GreedyPrep` of ``occ``, kept in ``occ.memo`` (two threads may both make
    it: the same arrays)."""
    found = occ.memo.get("greedy")
    if isinstance(found, GreedyPrep):
        return found
    c, ginv, uinv, order_u = occ.counts, occ.ginv, occ.uinv, occ.order_u
    n_grids = occ.grid_ids.size
    # Per grid: distinct counts in descending order, flat, with multiplicities: the
    # distinct keys (grid, cmax - count) ascending, and each pair's index among them.
    cmax = np.int64(c.max())
    dkey, dpos_a = unique_inverse(ginv * (cmax + 1) + (cmax - c))
    dgrid_a, rest = np.divmod(dkey, cmax + 1)
    dval_a = cmax - rest
    dmult_a = np.bincount(dpos_a, minlength=dkey.size)
    gfirst = np.searchsorted(dgrid_a, np.arange(n_grids), side="left")
    gend_a = np.searchsorted(dgrid_a, np.arange(n_grids), side="right")
    p2_a = gfirst + 1  # next distinct count (all multiplicities are >= 1 initially)
    top2 = np.where(p2_a < gend_a, dval_a[np.minimum(p2_a, dval_a.size - 1)], 0)
    NK_a = np.bincount(ginv, minlength=n_grids)  # kept users per grid
    # Per user: its pairs at positions ustart[u]..ustart[u+1]-1 of the rows sorted by
    # (user, grid), i.e. in ascending grid id.
    Gl = np.bincount(uinv, minlength=occ.user_ids.size)
    ustart_a = np.zeros(occ.user_ids.size + 1, dtype=np.int64)
    np.cumsum(Gl, out=ustart_a[1:])
    prep = GreedyPrep(
        dval_a, dmult_a, gfirst, gend_a, p2_a, top2, NK_a, Gl, ustart_a, int(Gl.max()),
        ginv[order_u], c[order_u], dpos_a[order_u],
    )  # fmt: skip
    occ.memo["greedy"] = prep
    return prep


def suppress_users(
    occ: Occupancy,
    U: float,
    eps: float,
    split: str,
    *,
    error_target: float | None,
    protect_min_error_grid: bool,
    compiled: bool = True,
) -> Suppression:
    """Run 004 Alg. 1 on ``occ``: remove users from grids stage by stage until one
    cannot be removed within the threshold (``error_target``, else ``max_g E_g``).

    ``split="half"`` runs compiled (:mod:`app.core.planning.clip_user_kernel`, the same decisions);
    ``compiled=False`` keeps the Python loop (the reference the tests compare with)."""
    prep = greedy_prep(occ)
    c, n_per_grid = occ.counts, occ.n_per_grid
    dval_a, dmult_a, gfirst, gend_a = prep.dval, prep.dmult, prep.gfirst, prep.gend
    p2_a, top2, NK_a, Gl, ustart_a, G1 = prep.p2, prep.top2, prep.NK, prep.Gl, prep.ustart, prep.G1

    # Initial errors (004 eq. 12 = eq. 13 with nothing clipped).
    init_err = joint_clip_errors(U, eps, dval_a[gfirst], n_per_grid, n_per_grid, split=split)
    E = float(init_err.max()) if error_target is None else error_target
    protected = int(np.argmin(init_err)) if protect_min_error_grid else -1
    # the same stages, compiled (app.core.planning.clip_user_kernel); it changes the
    # multiplicities, pointers, totals and maxima it is given: copies of the prepared ones
    if split == "half" and compiled:
        blocked_a = NK_a == 1
        if protected >= 0:
            blocked_a[protected] = True
        S_a = n_per_grid.copy()
        top1_a = dval_a[gfirst]
        removed_a = np.empty(c.size, dtype=np.int64)
        K, n_removed = greedy_half(
            float(U), float(eps), float(E), dval_a, dmult_a.copy(), gend_a, gfirst.copy(),
            top1_a, dmult_a[gfirst], p2_a.copy(), top2, S_a, n_per_grid, NK_a, blocked_a,
            ustart_a, prep.pg, prep.pm, prep.pd, Gl, G1, removed_a,
        )  # fmt: skip
        return Suppression(G1, int(K), E, removed_a[:n_removed].copy(), S_a, top1_a)
    pg_a, pm_a, pd_a = prep.pg, prep.pm, prep.pd
    ustart = ustart_a.tolist()
    pg = pg_a.tolist()
    pm = pm_a.tolist()
    pd = pd_a.tolist()
    removed_flag = bytearray(c.size)
    dval = dval_a.tolist()
    dmult = dmult_a.tolist()
    gend = gend_a.tolist()
    p1 = gfirst.tolist()  # index of the largest kept count
    top1 = dval_a[gfirst].tolist()
    cnt1 = dmult_a[gfirst].tolist()
    p2 = p2_a.tolist()
    top2_l = top2.tolist()
    S = n_per_grid.tolist()  # kept total ΣΓ
    N = list(S)  # original record count n (fixed)
    NK = NK_a.tolist()
    buckets: dict[int, list[int]] = {}
    for lvl in np.unique(Gl).tolist():
        buckets[lvl] = np.flatnonzero(Gl == lvl).tolist()

    # Blocked grids: a removal there would empty the grid, or it is protected.
    blocked = [k == 1 for k in NK]
    if protected >= 0:
        blocked[protected] = True

    err = scalar_error_fn(U, eps, split)  # 004 eq. 13, bit for bit bounds.py's

    removed_pos: list[int] = []
    level = G1
    K = G1
    inf = math.inf
    while level > 1:  # 004 Alg. 1 line 5; no stage at level 1 (app.core.planning.clip_user)
        stage = buckets.pop(level)  # L(t) in ascending user id (line 6)
        halted = False
        for u in stage:  # line 7
            best = inf
            bp = -1
            for p in range(ustart[u], ustart[u + 1]):  # lines 8-10: E_g(l) for g in G_l
                if removed_flag[p]:
                    continue
                g = pg[p]
                if blocked[g]:
                    continue
                mval = pm[p]
                t1 = top1[g]
                mx = top2_l[g] if (mval == t1 and cnt1[g] == 1) else t1
                s = S[g] - mval
                n = N[g]
                e = err(mx, s, n)
                if e < best:  # line 11: argmin, ties to the smallest grid id
                    best = e
                    bp = p
            if bp < 0 or best > E:  # line 12: cannot be suppressed within E -> halt
                halted = True
                break
            # Lines 17-19: suppress user u in grid pg[bp]; update ΣΓ, kept users, top two.
            removed_flag[bp] = 1
            removed_pos.append(bp)
            g = pg[bp]
            S[g] -= pm[bp]
            NK[g] -= 1
            if NK[g] == 1:
                blocked[g] = True
            d = pd[bp]
            dmult[d] -= 1
            end = gend[g]
            if d == p1[g]:
                cnt1[g] -= 1
                if cnt1[g] == 0:
                    q = p2[g]  # invariant: first index after p1 with multiplicity > 0
                    p1[g] = q
                    top1[g] = dval[q]
                    cnt1[g] = dmult[q]
                    q += 1
                    while q < end and dmult[q] == 0:
                        q += 1
                    p2[g] = q
                    top2_l[g] = dval[q] if q < end else 0
            elif d == p2[g] and dmult[d] == 0:
                q = d + 1
                while q < end and dmult[q] == 0:
                    q += 1
                p2[g] = q
                top2_l[g] = dval[q] if q < end else 0
        if halted:
            K = level
            break
        # Every user of L(t) lost one grid: they join those one level below.
        level -= 1
        K = level
        below = buckets.get(level)
        buckets[level] = stage if not below else sorted(below + stage)

    return Suppression(G1, K, E, *(np.asarray(x, dtype=np.int64) for x in (removed_pos, S, top1)))
