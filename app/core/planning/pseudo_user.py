"""The pseudo-user step after Clip-User (004 §V-B3, eq. 15, docs/math.md §6.3).

Every kept user of grid ``g`` is clipped to ``Γ_l(m) = min(Γ_l, m)`` with the
integer ``m ∈ [Γ_*, Γ*]`` minimising ``E_g(m)``, which gives the new largest error
``Ē``. Since ``m >= Γ_*`` no user leaves a grid, so ``K`` does not change. The
kept counts are sorted once and ``E_g(m)`` is evaluated for every integer ``m``
in range with numpy and prefix sums (:func:`pseudo_user_step` says why every
integer, not only the distinct counts); where counts are small the sums come from a
(grid, count) table of the kept users instead of a sort, the same integers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.core.mechanisms.bounds import joint_clip_errors

__all__ = ["pseudo_user_step"]

# Largest number of candidate ``m`` values evaluated at once.
_CHUNK = 1 << 20


def pseudo_user_step(
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
    if n_grids * int(width) <= 2 * kg.size + _CHUNK:
        lo, hi, kept_sum = _by_table(kg, kc, n_grids, int(width))
    else:
        lo, hi, kept_sum = _by_sort(kg, kc, n_grids, width)

    # Segments of at most _CHUNK candidates (a grid may span several, in m order).
    n_seg = (hi - lo) // _CHUNK + 1
    seg_grid_a = np.repeat(np.arange(n_grids), n_seg)
    seg_k = np.arange(seg_grid_a.size) - np.repeat(np.cumsum(n_seg) - n_seg, n_seg)
    seg_lo_a = lo[seg_grid_a] + seg_k * _CHUNK
    seg_len = np.minimum(hi[seg_grid_a] - seg_lo_a + 1, _CHUNK)
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
        s = kept_sum(sgid, m)
        e = joint_clip_errors(U, eps, m, s, n_per_grid[sgid], split=split)
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


#: ``ΣΓ(m)`` of grids ``g`` at clips ``m`` (arrays of one length): ``Σ_l min(Γ_l, m)``.
KeptSum = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _by_sort(
    kg: np.ndarray, kc: np.ndarray, n_grids: int, width: np.int64
) -> tuple[np.ndarray, np.ndarray, KeptSum]:
    """Each grid's smallest and largest kept count and ``ΣΓ(m)``, from the pairs sorted
    by (grid, count) and their prefix sums."""
    keys = kg * width + kc  # sorted keys = pairs by (grid, kept count)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    sg = kg[order]
    sc = kc[order]
    start = np.searchsorted(sg, np.arange(n_grids), side="left")
    end = np.searchsorted(sg, np.arange(n_grids), side="right")
    prefix = np.zeros(sc.size + 1, dtype=np.int64)
    np.cumsum(sc, out=prefix[1:])

    def kept_sum(g: np.ndarray, m: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(keys, g * width + m, side="right")
        out: np.ndarray = prefix[pos] - prefix[start[g]] + m * (end[g] - pos)
        return out

    return sc[start], sc[end - 1], kept_sum


def _by_table(
    kg: np.ndarray, kc: np.ndarray, n_grids: int, width: int
) -> tuple[np.ndarray, np.ndarray, KeptSum]:
    """:func:`_by_sort`'s figures from a (grid, count) table of kept users, where it is
    small (counts are bounded): per grid and ``m``, the users and the records of counts
    ``<= m``, so ``ΣΓ(m)`` is the same integer without a sort of the pairs."""
    table = np.bincount(kg * width + kc, minlength=n_grids * width).reshape(n_grids, width)
    held = table > 0
    lo = np.argmax(held, axis=1).astype(np.int64)
    hi = (width - 1 - np.argmax(held[:, ::-1], axis=1)).astype(np.int64)
    users_le = np.cumsum(table, axis=1).reshape(-1)
    records_le = np.cumsum(table * np.arange(width, dtype=np.int64), axis=1).reshape(-1)
    users = users_le[width - 1 :: width]

    def kept_sum(g: np.ndarray, m: np.ndarray) -> np.ndarray:
        at = g * width + m
        out: np.ndarray = records_le[at] + m * (users[g] - users_le[at])
        return out

    return lo, hi, kept_sum
