"""Clip-User (004 Alg. 1) and the pseudo-user step (004 eq. 15) over many grids.

Releasing every grid at ``eps`` costs user ``l`` ``eps`` per grid where ``l`` still
has kept records, so the whole release is ``G₁ eps``-DP with ``G₁`` the most grids
any user occupies (004 Cor. II.1, docs/math.md §6.1). Clip-User suppresses every record of
chosen users in chosen grids to lower that factor to ``K`` without letting any
touched grid's worst-case error ``E_g`` (004 eq. 13, docs/math.md §4.2) rise above
``E = max_g E_g`` (004 eq. 12) or a given target. Everything here is a function
of the public occupancy ``m_{g,l}`` and ``U``; no value is looked at, so planning
costs no privacy budget (docs/math.md §1.4).

The pseudo-user step (004 §V-B3, eq. 15) then clips every kept user of grid ``g``
to ``Γ_l(m) = min(Γ_l, m)`` with the integer ``m ∈ [Γ_*, Γ*]`` minimising
``E_g(m)``, which gives the new largest error ``Ē``.

Interpretation of 004 Alg. 1 used here (docs/math.md §6.2 says where it departs from
the paper, and why):

* ``E_g`` of a grid with kept counts ``Γ`` is ``joint_clip_error(U, eps, Γ*, ΣΓ, n)``
  from :mod:`app.core.bounds`: exact piecewise sensitivities (004 Prop. III.1,
  Lemma III.3) and the corrected variance bias (004 Thm IV.2 as fixed in docs/math.md §3.2),
  with ``n`` always the grid's *original* record count. During Clip-User a kept
  user has ``Γ = m_{g,l}`` and a removed one ``Γ = 0``.
* Stage ``t`` (Alg. 1 lines 6–19): ``L(t)`` is fixed at the start of the stage as
  the users whose current grid count ``G_l`` equals the current maximum, taken in
  ascending user id. Each of them is visited once. For the visited user ``l`` and
  every grid ``g`` it still occupies, ``E_g(l)`` is the error of ``g`` with ``l``
  removed and all earlier removals kept. The grid with the **smallest** ``E_g(l)``
  is picked (Alg. 1 line 11; the ``argmax`` of 004 eq. 14 is a typo, docs/math.md §6.2),
  ties to the smallest grid id. If that error exceeds ``E`` (``E_g(l) > E``; equal
  is allowed) the whole algorithm halts and ``l`` keeps all its grids (line 14);
  otherwise ``l`` is removed from that grid and ``G_l`` drops by one. Removals
  already made earlier in the halting stage stay, as in Alg. 1 (only the failing
  user is reset), even though they cannot lower ``K`` any more.
* When a stage finishes without halting, every user of ``L(t)`` has dropped by one
  grid, so the next stage's ``L(t+1)`` is those users together with the users
  that were already one grid below.
* A removal that would leave a grid with no kept user is never a candidate; nor,
  with ``protect_min_error_grid``, is any removal from the grid with the smallest
  initial ``E_g`` (ties to the smallest grid id; 004 §VI-A3). A user with no
  candidate grid cannot be suppressed, which halts the algorithm like an error
  above ``E``.
* No stage is run once the maximum grid count is 1: grids are never emptied, so
  ``K >= 1`` whatever happens, and removing users from their last grid would only
  raise errors without lowering ``K``. (Alg. 1 read literally would go on
  removing such users until one fails; ``K`` is the same either way.)
* ``error_target``: when given, it replaces ``E`` as the threshold (004 footnote
  3). Grids that Clip-User never touches keep their initial error, which may
  exceed the target.

``K`` is returned as ``max_l G_l`` after the removals, so charging ``eps`` per kept
grid costs no user more than ``K eps`` (004 Prop. V.1). The pseudo-user step
never removes a user from a grid (``m >= Γ_*``), so it does not change ``K``.

Efficiency (docs/math.md §6.4): each grid keeps ``ΣΓ``, its kept-user count and its largest
and second-largest kept counts (with the multiplicity of the largest) in flat
Python lists, with the grid's distinct counts sorted once and two pointers that
only move forward. A trial removal is then O(1) and an actual removal amortised
O(1). A user is visited at most ``G_l - 1`` times (once per stage it takes part
in), each visit scanning its ``G_l`` original pairs, so the whole of Alg. 1 costs
O(Σ_l G_l²) elementary steps plus O(P log P) numpy preparation for ``P`` pairs:
linear in the number of (user, grid) pairs when each user occupies a bounded
number of grids, never the product users × grids. The trial error is 004 eq. 13
inlined with exactly the float operations of ``bounds.joint_clip_error`` (a unit
test checks bit equality), so the fast loop and a from-scratch reference take the
same decisions, ties included. The pseudo-user step sorts the kept counts once
and evaluates ``E_g(m)`` for every integer ``m`` in range with numpy and prefix
sums (see :func:`_pseudo_user_step` for why every integer, not only the distinct
counts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from app.core.bounds import check_bound, check_epsilon, sum_exceeds

__all__ = ["ClipUserPlan", "FrozenMap", "clip_user", "grid_joint_errors", "plan_kept"]

_SPLITS = ("half", "optimal")
# Largest number of candidate ``m`` values evaluated at once in the pseudo-user step.
_CHUNK = 1 << 20

_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenMap(Mapping[_K, _V]):
    """A read-only, picklable mapping (plans may be cached or sent between processes)."""

    __slots__ = ("_data",)
    _data: dict[_K, _V]  # set once in __init__ (the slot is declared above)

    def __init__(self, data: Mapping[_K, _V]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getitem__(self, key: _K) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("FrozenMap is read-only")

    def __reduce__(self) -> tuple[type[FrozenMap[_K, _V]], tuple[dict[_K, _V]]]:
        return (FrozenMap, (self._data,))


@dataclass(frozen=True)
class ClipUserPlan:
    """Outcome of Clip-User (004 Alg. 1) and the pseudo-user step (004 eq. 15).

    Attributes:
        G1: most grids any user occupies before Clip-User (004 Cor. II.1).
        K: most grids any user still occupies after Clip-User; releasing every
            grid at ``eps`` is ``K eps``-DP (004 Prop. V.1).
        E: the error threshold used: ``max_g E_g`` before any removal (004 eq. 12)
            or the caller's ``error_target``.
        E_bar: ``max_g E_g(m_g)`` after the pseudo-user step (004 eq. 15), or
            ``max(grid_errors)`` when the step is off.
        removed: suppressed ``(grid, user)`` pairs, in removal order.
        m: per grid, the pseudo-user clip ``m_g`` (largest kept count when off).
        grid_errors: per grid, ``E_g`` after the removals, before the pseudo-user step.
        grid_errors_bar: per grid, ``E_g(m_g)`` after the pseudo-user step.
    """

    G1: int
    K: int
    E: float
    E_bar: float
    removed: tuple[tuple[int, int], ...]
    m: Mapping[int, int]
    grid_errors: Mapping[int, float]
    grid_errors_bar: Mapping[int, float]


# --------------------------------------------------------------------------- errors


def _scalar_error_fn(U: float, eps: float, split: str) -> Callable[[int, int, int], float]:
    """Return ``err(max_kept, kept_total, total)`` equal bit for bit to
    :func:`app.core.bounds.joint_clip_error` (004 eq. 13), without its checks.

    The hot loop of Clip-User evaluates it millions of times; the arithmetic is
    written in exactly the same order as in ``bounds`` so the floats agree (a unit
    test checks this on many inputs).
    """
    UU = U * U
    quarter = UU / 4.0
    half_eps = eps / 2.0

    def parts(mx: int, s: int, n: int) -> tuple[float, float, float]:
        d_mu = U * mx / s
        if s > 2 * mx:
            d_var = UU * mx * (s - mx) / (s * s)
        elif s % 2 == 0:
            d_var = quarter
        else:
            d_var = quarter * (1.0 - 1.0 / (s * s))
        if s == n:
            var_bias = 0.0
        elif n <= 2 * s:
            var_bias = UU * s * (n - s) / (n * n)
        elif n % 2 == 0:
            var_bias = quarter
        else:
            var_bias = quarter * (1.0 - 1.0 / (n * n))
        return U * (1.0 - s / n) + var_bias, d_mu, d_var

    if split == "half":

        def err(mx: int, s: int, n: int) -> float:
            bias, d_mu, d_var = parts(mx, s, n)
            return bias + (d_mu / half_eps + d_var / half_eps)  # 0/eps is 0 when d_var = 0

        return err

    def err_opt(mx: int, s: int, n: int) -> float:
        bias, d_mu, d_var = parts(mx, s, n)
        if d_mu == 0 and d_var == 0:
            eps1 = eps2 = half_eps
        else:
            ra, rb = math.sqrt(d_mu), math.sqrt(d_var)
            eps1 = eps * ra / (ra + rb)
            eps2 = eps - eps1
            while eps2 > 0.0 and sum_exceeds(eps1, eps2, eps):  # as bounds.optimal_split
                eps2 = math.nextafter(eps2, 0.0)
        # bounds.py: a statistic with zero sensitivity gets no noise (not 0/0).
        noise = (d_mu / eps1 if d_mu > 0 else 0.0) + (d_var / eps2 if d_var > 0 else 0.0)
        return bias + noise

    return err_opt


def grid_joint_errors(
    U: float,
    eps: float,
    max_kept: np.ndarray,
    kept_total: np.ndarray,
    total: np.ndarray,
    *,
    split: str = "half",
) -> np.ndarray:
    """Vectorised :func:`app.core.bounds.joint_clip_error` (004 eq. 13, docs/math.md §4.2).

    Element-wise over integer arrays (``1 <= max_kept <= kept_total <= total``);
    the float operations are those of ``bounds`` in the same order, so every entry
    equals the scalar function exactly (tested). Inputs are not validated beyond
    shape; counts must stay below 2**31 so ``n²`` fits in int64 exactly.
    """
    U = check_bound(U)
    eps = check_epsilon(eps)
    if split not in _SPLITS:
        raise ValueError(f"unknown split {split!r}; use 'half' or 'optimal'")
    mx = np.asarray(max_kept, dtype=np.int64)
    s = np.asarray(kept_total, dtype=np.int64)
    n = np.asarray(total, dtype=np.int64)
    UU = U * U
    quarter = UU / 4.0
    d_mu = U * mx / s
    s2 = s * s
    d_var = np.where(
        s > 2 * mx,
        UU * mx * (s - mx) / s2,
        np.where(s % 2 == 0, quarter, quarter * (1.0 - 1.0 / s2)),
    )
    n2 = n * n
    var_bias = np.where(
        s == n,
        0.0,
        np.where(
            n <= 2 * s,
            UU * s * (n - s) / n2,
            np.where(n % 2 == 0, quarter, quarter * (1.0 - 1.0 / n2)),
        ),
    )
    bias = U * (1.0 - s / n) + var_bias
    if split == "half":
        eps1 = eps2 = eps / 2.0
        return bias + (d_mu / eps1 + d_var / eps2)  # 0/eps2 is 0 when d_var = 0
    ra, rb = np.sqrt(d_mu), np.sqrt(d_var)
    both_zero = (d_mu == 0) & (d_var == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        e1 = np.where(both_zero, eps / 2.0, eps * ra / (ra + rb))
        e2 = np.where(both_zero, eps / 2.0, eps - e1)
        over = (e2 > 0.0) & sum_exceeds(e1, e2, eps)
        while over.any():  # as bounds.optimal_split: never above eps
            e2 = np.where(over, np.nextafter(e2, 0.0), e2)
            over = (e2 > 0.0) & sum_exceeds(e1, e2, eps)
        # bounds.py: a statistic with zero sensitivity gets no noise (not 0/0).
        noise = np.where(d_mu > 0, d_mu / e1, 0.0) + np.where(d_var > 0, d_var / e2, 0.0)
    out: np.ndarray = bias + noise
    return out


# ----------------------------------------------------------------------- validation


def _as_int_array(name: str, a: object) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array")
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "b":
        raise ValueError(f"{name} must hold integers, not booleans")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        if np.max(np.abs(arr)) >= 2**62:
            raise ValueError(f"{name} holds integers too large")
        return arr.astype(np.int64)
    raise ValueError(f"{name} must hold integers")


def _validate_pairs(
    grids: object, users: object, counts: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Check the occupancy; return counts, ids, inverse indices, per-grid totals and
    the row order sorted by (user, grid)."""
    g = _as_int_array("grids", grids)
    u = _as_int_array("users", users)
    c = _as_int_array("counts", counts)
    if not g.size == u.size == c.size:
        raise ValueError("grids, users and counts must have the same length")
    if g.size == 0:
        raise ValueError("the occupancy is empty: need at least one (grid, user) pair")
    if g.min() < 0 or u.min() < 0:
        raise ValueError("grid and user ids must be non-negative")
    if c.min() < 1:
        raise ValueError("every listed (grid, user) pair needs a count >= 1")
    if c.max() >= 2**31:
        raise ValueError("counts must be below 2**31")
    grid_ids, ginv = np.unique(g, return_inverse=True)
    user_ids, uinv = np.unique(u, return_inverse=True)
    ginv = ginv.astype(np.int64, copy=False)
    uinv = uinv.astype(np.int64, copy=False)
    key = uinv * np.int64(grid_ids.size) + ginv
    order_u = np.argsort(key, kind="stable")
    skey = key[order_u]
    if np.any(skey[1:] == skey[:-1]):
        raise ValueError("duplicate (grid, user) pairs in the occupancy")
    n_per_grid = np.zeros(grid_ids.size, dtype=np.int64)
    np.add.at(n_per_grid, ginv, c)  # exact: each count < 2**31, at most 2**32 rows
    if n_per_grid.max() >= 2**31:
        raise ValueError("a grid's record count must be below 2**31")
    return c, grid_ids, ginv, user_ids, uinv, n_per_grid, order_u


# ---------------------------------------------------------------------- Clip-User


def clip_user(
    grids: object,
    users: object,
    counts: object,
    U: float,
    eps: float,
    *,
    error_target: float | None = None,
    protect_min_error_grid: bool = False,
    split: str = "half",
    pseudo_user: bool = True,
) -> ClipUserPlan:
    """Plan Clip-User (004 Alg. 1) and the pseudo-user step (004 eq. 15, docs/math.md §6.2–§6.3).

    Args:
        grids, users, counts: equal-length integer arrays, one row per occupied
            ``(grid, user)`` pair with its record count ``m_{g,l} >= 1``. Ids are
            arbitrary non-negative integers; "smallest grid id" and "ascending user
            id" are numeric orders.
        U: public bound on values (``[0, U]``).
        eps: budget of each grid's joint mean+variance release (004 eq. 13).
        error_target: threshold replacing ``E = max_g E_g`` (004 footnote 3).
        protect_min_error_grid: never remove from the grid with the smallest
            initial ``E_g`` (004 §VI-A3).
        split: ``"half"`` (``eps/2`` each, 004 eq. 13) or ``"optimal"`` (docs/math.md §4.3).
        pseudo_user: run the pseudo-user step (004 §V-B3); when off ``m_g`` is the
            largest kept count of ``g`` (no clipping).

    Returns:
        A :class:`ClipUserPlan`. See the module docstring for how Alg. 1 is read.

    Raises:
        ValueError: bad shapes, non-integer or negative ids, counts < 1, duplicate
            pairs, empty occupancy, ``U`` or ``eps`` not finite and > 0, unknown
            ``split``, or ``error_target`` NaN or negative.
    """
    U = check_bound(U)
    eps = check_epsilon(eps)
    if split not in _SPLITS:
        raise ValueError(f"unknown split {split!r}; use 'half' or 'optimal'")
    c, grid_ids, ginv, user_ids, uinv, n_per_grid, order_u = _validate_pairs(grids, users, counts)
    n_grids = grid_ids.size
    n_users = user_ids.size

    # Per grid: distinct counts in descending order, flat, with multiplicities.
    cmax = np.int64(c.max())
    order_g = np.argsort(ginv * (cmax + 1) + (cmax - c), kind="stable")
    cg = c[order_g]
    gg = ginv[order_g]
    new_val = np.ones(cg.size, dtype=bool)
    new_val[1:] = (gg[1:] != gg[:-1]) | (cg[1:] != cg[:-1])
    dstart = np.flatnonzero(new_val)
    dval_a = cg[dstart]
    dgrid_a = gg[dstart]
    dmult_a = np.diff(np.append(dstart, cg.size))
    dpos_sorted = np.cumsum(new_val) - 1  # distinct index of each sorted pair
    dpos_a = np.empty_like(dpos_sorted)
    dpos_a[order_g] = dpos_sorted
    gfirst = np.searchsorted(dgrid_a, np.arange(n_grids), side="left")
    gend_a = np.searchsorted(dgrid_a, np.arange(n_grids), side="right")

    dval = dval_a.tolist()
    dmult = dmult_a.tolist()
    gend = gend_a.tolist()
    p1 = gfirst.tolist()  # index of the largest kept count
    top1 = dval_a[gfirst].tolist()
    cnt1 = dmult_a[gfirst].tolist()
    p2_a = gfirst + 1  # next distinct count (all multiplicities are >= 1 initially)
    p2 = p2_a.tolist()
    top2 = np.where(p2_a < gend_a, dval_a[np.minimum(p2_a, dval_a.size - 1)], 0).tolist()
    S = n_per_grid.tolist()  # kept total ΣΓ
    N = list(S)  # original record count n (fixed)
    NK = np.bincount(ginv, minlength=n_grids).tolist()  # kept users per grid

    # Initial errors (004 eq. 12 = eq. 13 with nothing clipped).
    init_err = grid_joint_errors(U, eps, dval_a[gfirst], n_per_grid, n_per_grid, split=split)
    E = float(init_err.max()) if error_target is None else _check_target(error_target)
    protected = int(np.argmin(init_err)) if protect_min_error_grid else -1

    # Per user: its pairs at positions ustart[u]..ustart[u+1]-1 of the rows sorted by
    # (user, grid), i.e. in ascending grid id; removed ones are flagged.
    ustart = np.searchsorted(uinv[order_u], np.arange(n_users + 1), side="left").tolist()
    pg = ginv[order_u].tolist()
    pm = c[order_u].tolist()
    pd = dpos_a[order_u].tolist()
    removed_flag = bytearray(c.size)
    Gl = np.bincount(uinv, minlength=n_users)
    G1 = int(Gl.max())
    buckets: dict[int, list[int]] = {}
    for lvl in np.unique(Gl).tolist():
        buckets[lvl] = np.flatnonzero(Gl == lvl).tolist()

    # Blocked grids: a removal there would empty the grid, or it is protected.
    blocked = [k == 1 for k in NK]
    if protected >= 0:
        blocked[protected] = True

    # Constants of the inlined 004 eq. 13 (same operation order as bounds.py).
    half = split == "half"
    err = _scalar_error_fn(U, eps, split)
    UU = U * U
    quarter = UU / 4.0
    half_eps = eps / 2.0

    removed_pos: list[int] = []
    level = G1
    K = G1
    inf = math.inf
    while level > 1:  # 004 Alg. 1 line 5; no stage at level 1 (module docstring)
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
                mx = top2[g] if (mval == t1 and cnt1[g] == 1) else t1
                s = S[g] - mval
                n = N[g]
                if half:
                    # joint_clip_error(U, eps, mx, s, n) inlined; s < n here.
                    if s > 2 * mx:
                        d_var = UU * mx * (s - mx) / (s * s)
                    elif s % 2 == 0:
                        d_var = quarter
                    else:
                        d_var = quarter * (1.0 - 1.0 / (s * s))
                    if n <= 2 * s:
                        var_bias = UU * s * (n - s) / (n * n)
                    elif n % 2 == 0:
                        var_bias = quarter
                    else:
                        var_bias = quarter * (1.0 - 1.0 / (n * n))
                    e = U * (1.0 - s / n) + var_bias + (U * mx / s / half_eps + d_var / half_eps)
                else:
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
                    top2[g] = dval[q] if q < end else 0
            elif d == p2[g] and dmult[d] == 0:
                q = d + 1
                while q < end and dmult[q] == 0:
                    q += 1
                p2[g] = q
                top2[g] = dval[q] if q < end else 0
        if halted:
            K = level
            break
        # Every user of L(t) lost one grid: they join those one level below.
        level -= 1
        K = level
        below = buckets.get(level)
        buckets[level] = stage if not below else sorted(below + stage)

    # Kept state after Clip-User.
    rem_pos = np.asarray(removed_pos, dtype=np.int64)
    kept_mask = np.ones(c.size, dtype=bool)
    if rem_pos.size:
        kept_mask[order_u[rem_pos]] = False
    S_a = np.asarray(S, dtype=np.int64)
    top1_a = np.asarray(top1, dtype=np.int64)
    errs = grid_joint_errors(U, eps, top1_a, S_a, n_per_grid, split=split)

    if pseudo_user:
        m_a, errs_bar = _pseudo_user_step(
            U, eps, ginv[kept_mask], c[kept_mask], n_per_grid, split=split
        )
    else:
        m_a, errs_bar = top1_a, errs

    removed_orig = order_u[rem_pos] if rem_pos.size else rem_pos
    removed = tuple(
        zip(
            grid_ids[ginv[removed_orig]].tolist(),
            user_ids[uinv[removed_orig]].tolist(),
            strict=True,
        )
    )
    gid = grid_ids.tolist()
    return ClipUserPlan(
        G1=G1,
        K=K,
        E=E,
        E_bar=float(errs_bar.max()),
        removed=removed,
        m=FrozenMap(dict(zip(gid, m_a.tolist(), strict=True))),
        grid_errors=FrozenMap(dict(zip(gid, errs.tolist(), strict=True))),
        grid_errors_bar=FrozenMap(dict(zip(gid, errs_bar.tolist(), strict=True))),
    )


def _check_target(error_target: float) -> float:
    target = float(error_target)
    if math.isnan(target) or target < 0:
        raise ValueError(f"error_target must be a number >= 0, got {error_target!r}")
    return target


# -------------------------------------------------------------- pseudo-user step


def _pseudo_user_step(
    U: float,
    eps: float,
    kg: np.ndarray,
    kc: np.ndarray,
    n_per_grid: np.ndarray,
    *,
    split: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Per grid, the smallest integer ``m ∈ [Γ_*, Γ*]`` minimising ``E_g(m)`` (004 eq. 15).

    ``E_g(m) = joint_clip_error(U, eps, m, Σ_l min(Γ_l, m), n_g)``: for ``m <= Γ*``
    the largest clipped count is ``m`` itself. ``kg``/``kc`` list the kept pairs
    (grid index, kept count); every grid has at least one.

    Every integer in the range is evaluated, not only the distinct kept counts.
    Between two consecutive distinct counts ``ΣΓ(m) = P + r m`` is linear, and
    within one regime each term of ``E_g`` is concave in ``m`` (``m/(P + r m)`` is
    concave, so are ``f - f²`` of it and ``s(n - s)``), which alone would put the
    minimum at a distinct count; but the regimes switch inside a gap
    (``s > 2m``, ``n <= 2s``) and the ``s``-odd variants ``(U²/4)(1 - 1/s²)`` are
    smaller than the even ones, so an interior ``m`` can win. The range sums to
    at most the grid's record count, and ``ΣΓ(m)`` comes from one sort and prefix
    sums, so this stays a few numpy passes over ``Σ_g (Γ*_g - Γ_*g + 1)`` values.

    Returns ``(m_g, E_g(m_g))`` as arrays indexed by grid.
    """
    n_grids = n_per_grid.size
    width = np.int64(kc.max()) + 2
    keys = kg * width + kc  # sorted keys = pairs by (grid, kept count)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    sg = kg[order]
    sc = kc[order]
    start = np.searchsorted(sg, np.arange(n_grids), side="left")
    end = np.searchsorted(sg, np.arange(n_grids), side="right")
    lo = sc[start]
    hi = sc[end - 1]
    prefix = np.zeros(sc.size + 1, dtype=np.int64)
    np.cumsum(sc, out=prefix[1:])

    # Segments of at most _CHUNK candidates (a grid may span several, in m order).
    seg_grid: list[int] = []
    seg_lo: list[int] = []
    seg_hi: list[int] = []
    for g, a, b in zip(range(n_grids), lo.tolist(), hi.tolist(), strict=True):
        while a <= b:
            top = min(b, a + _CHUNK - 1)
            seg_grid.append(g)
            seg_lo.append(a)
            seg_hi.append(top)
            a = top + 1
    seg_grid_a = np.asarray(seg_grid, dtype=np.int64)
    seg_lo_a = np.asarray(seg_lo, dtype=np.int64)
    seg_len = np.asarray(seg_hi, dtype=np.int64) - seg_lo_a + 1
    seg_best_m = np.empty(seg_grid_a.size, dtype=np.int64)
    seg_best_e = np.empty(seg_grid_a.size, dtype=np.float64)

    i = 0
    n_seg = seg_grid_a.size
    csum = np.concatenate(([0], np.cumsum(seg_len)))
    while i < n_seg:
        j = int(np.searchsorted(csum, csum[i] + _CHUNK, side="right")) - 1
        j = max(j, i + 1)  # at least one segment per chunk
        lens = seg_len[i:j]
        offs = np.concatenate(([0], np.cumsum(lens)[:-1]))
        sgid = np.repeat(seg_grid_a[i:j], lens)
        m = np.repeat(seg_lo_a[i:j], lens) + (
            np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(offs, lens)
        )
        pos = np.searchsorted(keys, sgid * width + m, side="right")
        gs = start[sgid]
        s = prefix[pos] - prefix[gs] + m * (end[sgid] - pos)
        e = grid_joint_errors(U, eps, m, s, n_per_grid[sgid], split=split)
        seg_min = np.minimum.reduceat(e, offs)
        hit = np.flatnonzero(e == np.repeat(seg_min, lens))
        first = hit[np.searchsorted(hit, offs, side="left")]
        seg_best_m[i:j] = m[first]
        seg_best_e[i:j] = seg_min
        i = j

    # Combine the segments of each grid: smallest error, then smallest m.
    gstart = np.searchsorted(seg_grid_a, np.arange(n_grids), side="left")
    best_e = np.minimum.reduceat(seg_best_e, gstart)
    seg_hit = np.flatnonzero(seg_best_e == best_e[seg_grid_a])
    first_seg = seg_hit[np.searchsorted(seg_hit, gstart, side="left")]
    return seg_best_m[first_seg], best_e


# ----------------------------------------------------------------------- helpers


def plan_kept(plan: ClipUserPlan, grids: object, users: object, counts: object) -> np.ndarray:
    """Kept count ``Γ`` of each listed pair under ``plan`` (004 §V-B2, eq. 15).

    ``0`` for a pair Clip-User removed, ``min(count, m_g)`` otherwise. The arrays
    are the occupancy the plan was made from (any order, any subset of it).
    Returns an int64 array aligned with the input rows.
    """
    g = _as_int_array("grids", grids)
    u = _as_int_array("users", users)
    c = _as_int_array("counts", counts)
    if not g.size == u.size == c.size:
        raise ValueError("grids, users and counts must have the same length")
    if g.size == 0:
        return np.zeros(0, dtype=np.int64)
    plan_grids = np.fromiter(plan.m.keys(), dtype=np.int64, count=len(plan.m))
    plan_m = np.fromiter(plan.m.values(), dtype=np.int64, count=len(plan.m))
    sort = np.argsort(plan_grids)
    plan_grids, plan_m = plan_grids[sort], plan_m[sort]
    idx = np.searchsorted(plan_grids, g)
    idx_c = np.minimum(idx, plan_grids.size - 1)
    if np.any(plan_grids[idx_c] != g):
        raise ValueError("a listed grid is not part of the plan")
    kept: np.ndarray = np.minimum(c, plan_m[idx_c])
    if plan.removed:
        rem = np.asarray(plan.removed, dtype=np.int64).reshape(-1, 2)
        # Dense indices over the ids seen in rows and removals, then one int64 key.
        _, gi = np.unique(np.concatenate((g, rem[:, 0])), return_inverse=True)
        uids, ui = np.unique(np.concatenate((u, rem[:, 1])), return_inverse=True)
        key = gi.astype(np.int64) * np.int64(uids.size) + ui
        kept[np.isin(key[: g.size], key[g.size :])] = 0
    return kept
