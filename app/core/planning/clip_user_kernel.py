"""Clip-User's greedy stages compiled with numba (docs/math.md §6.4), ``split="half"``.

The same loop as :func:`app.core.planning.clip_user_greedy.suppress_users` runs in Python, on the
same flat state (per grid ``ΣΓ``, kept users, largest and second-largest kept counts
with pointers into the grid's distinct counts), with the same integer operations and
the same trial error (:func:`app.core.planning.grid_errors.half_error`, compiled from its
source), so it takes the same decisions, ties included
(``tests/unit/core/test_clip_user_kernel.py`` checks the plans are identical on random
instances). Compiled, a stage costs nanoseconds per (user, grid) pair instead of
about a microsecond: a day of a 10⁶-record-per-hour city (1.2·10⁶ pairs, users in ~100
grids each, O(Σ_l G_l²) trial removals) plans in seconds instead of minutes.

Two changes of layout, not of decisions: the per-grid state read on a trial is
packed one grid per row, and each user's kept pairs are compacted as they are removed
(order kept: ties still go to the smallest grid id), so a visit scans the user's kept
pairs only. One simplification, exact: the stage at level ``v`` visits the users whose
original grid count is at least ``v``, in ascending id. That is what the Python loop's
buckets hold: a finished stage moves every one of its users one level down, where they
join the users that started there. And a cache, exact too (docs/math.md §6.4): a grid's
state changes only when a user is removed there, which lowers its kept-user count. So
each pair keeps its last trial error and that count, and a visit recomputes only the
pairs whose grid count has changed since: the same float comes back, ties included.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core.planning.grid_errors import half_error

__all__ = ["greedy_half"]

_TOP1, _TOP2, _CNT1, _S, _N, _BLOCKED = range(6)  # columns of the packed grid state


@njit(cache=True, nogil=True)
def _trial_error(st: np.ndarray, g: int, mval: int, U: float, eps: float) -> float:
    """004 eq. 13 for grid ``g`` without a kept user of count ``mval``:
    :func:`~app.core.planning.grid_errors.half_error` compiled, on int64 counts."""
    t1 = int(st[g, _TOP1])
    mx = int(st[g, _TOP2]) if (mval == t1 and st[g, _CNT1] == 1) else t1
    return half_error(U, eps, mx, int(st[g, _S]) - mval, int(st[g, _N]))


@njit(cache=True, nogil=True)
def greedy_half(
    U: float,
    eps: float,
    E: float,
    dval: np.ndarray,
    dmult: np.ndarray,
    gend: np.ndarray,
    p1: np.ndarray,
    top1: np.ndarray,
    cnt1: np.ndarray,
    p2: np.ndarray,
    top2: np.ndarray,
    S: np.ndarray,
    N: np.ndarray,
    NK: np.ndarray,
    blocked: np.ndarray,
    ustart: np.ndarray,
    pg: np.ndarray,
    pm: np.ndarray,
    pd: np.ndarray,
    Gl: np.ndarray,
    G1: int,
    removed_pos: np.ndarray,
) -> tuple[int, int]:
    """Run the stages; return ``(K, number of removals)``. The removed pairs' positions
    are the first entries of ``removed_pos``, in removal order; ``S`` and ``top1`` end
    as each grid's kept total and largest kept count."""
    n_users = Gl.size
    # The hot per-grid state, packed one grid per row, as int32 (counts and totals are
    # below 2**31, app.core.data.occupancy), so a look-up reads few bytes.
    st = np.empty((top1.size, 6), dtype=np.int32)
    st[:, _TOP1] = top1
    st[:, _TOP2] = top2
    st[:, _CNT1] = cnt1
    st[:, _S] = S
    st[:, _N] = N
    st[:, _BLOCKED] = blocked
    # Each user's kept pairs, compacted in place as they are removed (order kept).
    live = np.arange(pg.size)
    ulen = np.diff(ustart)
    # Per grid, its kept-user count: it drops on every removal there, the only change to
    # the grid's state. Per pair, its last trial error and that count then (0: no trial
    # yet, as a grid keeps >= 1 user).
    nk = NK.astype(np.int32)
    trial = np.empty(pg.size)
    seen = np.zeros(pg.size, dtype=np.int32)
    n_removed = 0
    level = G1
    K = G1
    while level > 1:
        halted = False
        for u in range(n_users):
            if Gl[u] < level:
                continue
            best = np.inf
            bp = -1
            bi = -1
            for i in range(ustart[u], ustart[u] + ulen[u]):
                p = live[i]
                g = pg[p]
                v = nk[g]
                if seen[p] != v:  # g changed since this pair's last trial, or none yet
                    seen[p] = v
                    trial[p] = np.inf if st[g, _BLOCKED] else _trial_error(st, g, pm[p], U, eps)
                e = trial[p]
                if e < best:
                    best = e
                    bp = p
                    bi = i
            if bp < 0 or best > E:
                halted = True
                break
            removed_pos[n_removed] = bp
            n_removed += 1
            last = ustart[u] + ulen[u] - 1
            for i in range(bi, last):
                live[i] = live[i + 1]
            ulen[u] -= 1
            g = pg[bp]
            st[g, _S] -= pm[bp]
            nk[g] -= 1
            if nk[g] == 1:
                st[g, _BLOCKED] = 1
            d = pd[bp]
            dmult[d] -= 1
            end = gend[g]
            if d == p1[g]:
                st[g, _CNT1] -= 1
                if st[g, _CNT1] == 0:
                    q = p2[g]
                    p1[g] = q
                    st[g, _TOP1] = dval[q]
                    st[g, _CNT1] = dmult[q]
                    q += 1
                    while q < end and dmult[q] == 0:
                        q += 1
                    p2[g] = q
                    st[g, _TOP2] = dval[q] if q < end else 0
            elif d == p2[g] and dmult[d] == 0:
                q = d + 1
                while q < end and dmult[q] == 0:
                    q += 1
                p2[g] = q
                st[g, _TOP2] = dval[q] if q < end else 0
        if halted:
            K = level
            break
        level -= 1
        K = level
    S[:] = st[:, _S]
    top1[:] = st[:, _TOP1]
    return K, n_removed
