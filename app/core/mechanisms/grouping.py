"""Pseudo-user (array) creation and the choices of the array length ``m_UB`` (seed 002).

All functions take public counts only. Users are processed in the order of
002 §III-A (counts non-increasing, ties by ascending user index) and each user
places its earliest ``min(m_l, m_UB)`` records.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from contextlib import suppress
from dataclasses import dataclass
from heapq import heappop, heappush

import numpy as np
import numpy.typing as npt

from app.core.data.counts import CountsInfo

__all__ = [
    "BestFit",
    "Wraparound",
    "array_gain",
    "bestfit",
    "bestfit_assign",
    "check_m_ub",
    "levy_m_ub",
    "levy_tau",
    "median_m_ub",
    "opt_array_convex_m",
    "opt_array_m",
    "wraparound",
]

_REL_TIE = 1e-12
_MAX_CACHED = 64


def _smallest_argmin(values: np.ndarray) -> int:
    """Index of the smallest minimiser, counting values within a relative 1e-12 as ties."""
    best = float(values.min())
    tol = _REL_TIE * max(abs(best), 1e-300)
    return int(np.flatnonzero(values <= best + tol)[0])


# --------------------------------------------------------------------- bestfit
def bestfit_assign(sizes: npt.ArrayLike, m_ub: int) -> tuple[np.ndarray, np.ndarray]:
    """BESTFIT (002 Alg. 2) for item sizes in non-increasing order, each ``<= m_ub``.

    Each item goes whole into the least-indexed array, among those with room for
    it, that is filled the most; returns ``(array index per item, fill per array)``.
    Items of size ``m_ub`` open a fresh array each. Partially filled arrays are kept
    in one min-heap of indices per fill level plus a sorted list of occupied levels,
    so an item costs O(log) and the whole packing O(L log L).
    """
    r = np.asarray(sizes, dtype=np.int64)
    if r.size and (np.any(r[:-1] < r[1:]) or r[0] > m_ub or r[-1] < 1):
        raise ValueError("sizes must be non-increasing and lie in [1, m_ub]")
    assign = np.empty(r.size, dtype=np.int64)
    n_full = int(np.count_nonzero(r == m_ub))
    assign[:n_full] = np.arange(n_full)
    fills: list[int] = [m_ub] * n_full
    heaps: dict[int, list[int]] = {}
    levels: list[int] = []
    for pos in range(n_full, r.size):
        size = int(r[pos])
        j = bisect_right(levels, m_ub - size) - 1
        if j >= 0:
            level = levels[j]
            heap = heaps[level]
            a = heappop(heap)
            if not heap:
                del levels[j]
                del heaps[level]
        else:
            a = len(fills)
            fills.append(0)
            level = 0
        new = level + size
        fills[a] = new
        assign[pos] = a
        if new < m_ub:
            bucket = heaps.get(new)
            if bucket is None:
                heaps[new] = [a]
                insort(levels, new)
            else:
                heappush(bucket, a)
    return assign, np.asarray(fills, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class BestFit:
    """BESTFIT arrays of length ``m_ub``: per user its array (-1 if inactive) and slots."""

    m_ub: int
    array_of: np.ndarray
    slots: np.ndarray
    fills: np.ndarray

    @property
    def k_bar(self) -> int:
        """``K̄``: the number of non-empty arrays."""
        return int(self.fills.size)


def bestfit(info: CountsInfo, m_ub: int) -> BestFit:
    """BESTFIT grouping of the active users with ``m_UB = m_ub`` (cached on ``info``)."""
    key = ("bestfit", int(m_ub))
    hit = info.cache.get(key)
    if isinstance(hit, BestFit):
        return hit
    sizes = np.minimum(info.sorted_eff, m_ub)
    assign, fills = bestfit_assign(sizes, int(m_ub))
    array_of = np.full(info.counts.size, -1, dtype=np.int64)
    slots = np.zeros(info.counts.size, dtype=np.int64)
    array_of[info.order] = assign
    slots[info.order] = sizes
    result = BestFit(int(m_ub), array_of, slots, fills)
    if len(info.cache) >= _MAX_CACHED:  # bound memory (quote_epsilon may try many m_UB)
        with suppress(RuntimeError, StopIteration):  # another thread changed the cache
            info.cache.pop(next(iter(info.cache)), None)
    info.cache[key] = result
    return result


# ------------------------------------------------------------------ wraparound
@dataclass(frozen=True, eq=False)
class Wraparound:
    """WRAPAROUND arrays (002 Alg. 1): ``K`` full arrays; per user its slots inside them."""

    m_ub: int
    k: int
    kept_slots: np.ndarray


def wraparound(info: CountsInfo, m_ub: int) -> Wraparound:
    """WRAPAROUND grouping: users fill arrays of length ``m_ub`` in turn, spilling over.

    Only the first ``K = floor(Σ min(m_l, m_UB) / m_UB)`` arrays (002 eq. 3), the full
    ones, are kept; ``kept_slots[l]`` counts user ``l``'s records inside them.
    """
    sizes = np.minimum(info.sorted_eff, m_ub)
    total = int(sizes.sum())
    k = total // int(m_ub)
    start = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    kept_sorted = np.clip(k * int(m_ub) - start, 0, sizes)
    kept = np.zeros(info.counts.size, dtype=np.int64)
    kept[info.order] = kept_sorted
    return Wraparound(int(m_ub), k, kept)


# --------------------------------------------------------------- m_UB choices
def median_m_ub(info: CountsInfo) -> int:
    """``m_UB = med(m_l)`` (002 §III-C; Lemma III.2 gives gain >= OPT/2)."""
    return info.median()


def array_gain(counts: npt.ArrayLike, m_ub: int) -> float:
    """Gain ``Δ_f / Δ̃_arr = (m*/n) Σ min(m_l, m_UB) / m_UB`` of 002 eq. 5."""
    m = np.asarray(counts, dtype=np.int64)
    m = m[m > 0]
    return float(m.max() / m.sum() * np.minimum(m, m_ub).sum() / m_ub)


def levy_m_ub(info: CountsInfo) -> int:
    """002 eq. 9: ``argmax_m Σ_l min(m_l, m) / √m`` over integers ``m_* <= m <= m*``.

    The smallest maximiser is taken on ties.
    """
    ms = np.arange(info.m_min, info.m_max + 1, dtype=np.int64)
    score = info.clipped_total(ms) / np.sqrt(ms)
    return int(ms[_smallest_argmin(-score)])


def opt_array_m(info: CountsInfo, U: float, eps: float) -> int:
    """``m^(ε)`` of 002 eq. 15: smallest minimiser over ``m ∈ {m_l}`` (Lemma V.2) of

    ``U (1 - ΣΓ/n) + U m / (ε ΣΓ)`` with ``Γ_l = min(m_l, m)``. ``n`` is the grid's
    full record count (with caps the first term is the true worst-case bias).
    """
    ms = np.unique(info.sorted_eff)
    s = info.clipped_total(ms).astype(np.float64)
    err = U * (1.0 - s / info.n) + U * ms / (eps * s)
    return int(ms[_smallest_argmin(err)])


def _convex_surrogate(info: CountsInfo, ms: np.ndarray) -> np.ndarray:
    """``Ē(m) = 1 - ΣΓ/n + max(m, m̄)/m*`` of 002 eq. 19 (on the capped counts)."""
    n_eff = info.n_eff
    s = info.clipped_total(ms).astype(np.float64)
    out: np.ndarray = 1.0 - s / n_eff + np.maximum(ms, n_eff / info.n_active) / info.m_max
    return out


def opt_array_convex_m(info: CountsInfo, rule: str = "exact") -> int:
    """``m̄^(ε)``: the ``m_UB`` of the convex surrogate 002 eq. 19 (independent of ``ε``).

    ``rule="exact"`` (default) returns the smallest integer minimiser of
    ``Ē(m) = 1 - ΣΓ/n + max(m, m̄)/m*`` over ``[m_*, m*]``, ``m̄ = n/L``. Ē is convex and
    piecewise linear, so a minimiser is where its subgradient contains 0 (the KKT
    condition); that is Lemma VI.2's ``m_q`` whenever ``q = n/m*`` is an integer with
    ``m_q >= m̄``. ``rule="paper"`` applies 002's procedure literally: ``m_q`` under
    those conditions, else the better end point of ``{m_*, m*}`` — which misses the
    minimiser whenever it sits at an interior kink (most count vectors), hence not
    the default.
    """
    if rule == "paper":
        n_eff, m_star = info.n_eff, info.m_max
        if n_eff % m_star == 0:
            q = n_eff // m_star
            if 1 <= q <= info.n_active:
                m_q = int(info.sorted_eff[q - 1])
                if m_q >= n_eff / info.n_active:
                    return m_q
        ms = np.array([info.m_min, m_star], dtype=np.int64)
    elif rule == "exact":
        ms = np.arange(info.m_min, info.m_max + 1, dtype=np.int64)
    else:
        raise ValueError(f"unknown rule {rule!r}; use 'exact' or 'paper'")
    return int(ms[_smallest_argmin(_convex_surrogate(info, ms))])


def check_m_ub(info: CountsInfo, m_ub: int) -> int:
    """Validate a user-given ``m_UB`` against ``[m_*, m*]`` of the (capped) grid."""
    if not (info.m_min <= m_ub <= info.m_max):
        raise ValueError(
            f"m_ub must lie in [m_*, m*] = [{info.m_min}, {info.m_max}] for this grid, got {m_ub}"
        )
    return int(m_ub)


def levy_tau(U: float, k_bar: int, m_ub: int, gamma: float) -> float:
    """Concentration radius ``τ = U √(ln(2K̄/γ) / (2 m_UB))`` (002 eq. 7)."""
    return U * math.sqrt(math.log(2.0 * k_bar / gamma) / (2.0 * m_ub))
