"""Array groupings and the choices of m_UB (002 §III-A, §V, §VI)."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.data.counts import prepare_counts
from app.core.mechanisms.grouping import (
    array_gain,
    bestfit,
    levy_m_ub,
    median_m_ub,
    opt_array_convex_m,
    opt_array_m,
    wraparound,
)

U = 65.0


def _random_counts(rng: np.random.Generator) -> np.ndarray:
    """Counts of 1–40 users, heavy-tailed half of the time."""
    L = int(rng.integers(1, 41))
    if rng.random() < 0.5:
        return rng.integers(1, int(rng.integers(2, 30)), size=L)
    return np.maximum(1, np.round(rng.lognormal(2.0, 1.2, size=L))).astype(int)


CASES = [_random_counts(np.random.default_rng(s)) for s in range(60)]


def _sorted_users(counts: np.ndarray) -> list[int]:
    """002 §III-A: non-increasing counts, ties by ascending user index."""
    return sorted(range(counts.size), key=lambda u: (-counts[u], u))


def _naive_bestfit(counts: np.ndarray, m_ub: int) -> tuple[dict[int, int], list[int]]:
    """002 Alg. 2 literally: L arrays; least-indexed among the fullest that fit."""
    fills = [0] * counts.size
    where: dict[int, int] = {}
    for u in _sorted_users(counts):
        r = min(int(counts[u]), m_ub)
        fit = [i for i, w in enumerate(fills) if m_ub - w >= r]
        top = max(fills[i] for i in fit)
        a = min(i for i in fit if fills[i] == top)
        fills[a] += r
        where[u] = a
    return where, [w for w in fills if w > 0]


def _naive_wraparound(counts: np.ndarray, m_ub: int) -> tuple[int, np.ndarray]:
    """002 Alg. 1 by laying records one by one into arrays of length m_UB."""
    owners: list[int] = []
    for u in _sorted_users(counts):
        owners += [u] * min(int(counts[u]), m_ub)
    k = len(owners) // m_ub
    kept = np.zeros(counts.size, dtype=int)
    for u in owners[: k * m_ub]:
        kept[u] += 1
    return k, kept


@pytest.mark.parametrize("counts", CASES, ids=str)
def test_bestfit_matches_algorithm_2(counts: np.ndarray) -> None:
    info = prepare_counts(counts)
    for m_ub in sorted({info.m_min, median_m_ub(info), info.m_max}):
        bf = bestfit(info, m_ub)
        where, fills = _naive_bestfit(counts, m_ub)
        # every user is in exactly one array, with min(m_l, m_UB) records
        assert np.all(bf.array_of >= 0)
        assert np.array_equal(bf.slots, np.minimum(counts, m_ub))
        assert [int(bf.array_of[u]) for u in range(counts.size)] == [
            where[u] for u in range(counts.size)
        ]
        assert bf.fills.tolist() == fills
        per_array = np.bincount(bf.array_of, weights=bf.slots, minlength=bf.k_bar)
        assert np.array_equal(per_array, bf.fills)
        assert np.all((bf.fills >= 1) & (bf.fills <= m_ub))
        # K̄ >= K (002 §III-A2)
        assert bf.k_bar >= wraparound(info, m_ub).k


@pytest.mark.parametrize("counts", CASES, ids=str)
def test_wraparound_keeps_the_full_arrays(counts: np.ndarray) -> None:
    info = prepare_counts(counts)
    for m_ub in range(info.m_min, info.m_max + 1, max(1, (info.m_max - info.m_min) // 5)):
        wrap = wraparound(info, m_ub)
        assert wrap.k == int(np.minimum(counts, m_ub).sum()) // m_ub  # 002 eq. 3
        k, kept = _naive_wraparound(counts, m_ub)
        assert wrap.k == k
        assert np.array_equal(wrap.kept_slots, kept)
        assert wrap.kept_slots.sum() == wrap.k * m_ub


@pytest.mark.parametrize("counts", CASES, ids=str)
def test_median_gain_is_at_least_half_of_opt(counts: np.ndarray) -> None:
    """002 Lemma III.2: m_UB = med(m_l) gives Δ_f/Δ̃_arr >= OPT/2, OPT = m* L/n."""
    info = prepare_counts(counts)
    m_ub = median_m_ub(info)
    half = (counts.size + 1) // 2  # med = the ceil(L/2)-th largest count (002 §II-A)
    assert np.count_nonzero(counts >= m_ub) >= half > np.count_nonzero(counts > m_ub)
    opt = counts.max() * counts.size / counts.sum()
    assert array_gain(counts, m_ub) >= opt / 2 - 1e-12
    # and no m_UB beats OPT itself (002 eq. 5)
    for m in range(info.m_min, info.m_max + 1):
        assert array_gain(counts, m) <= opt + 1e-9


def _eq15(counts: np.ndarray, m: int, eps: float) -> float:
    s = np.minimum(counts, m).sum()
    return U * (1 - s / counts.sum()) + U * m / (eps * s)


@pytest.mark.parametrize("counts", CASES[:30], ids=str)
def test_opt_array_m_minimises_eq15_and_is_monotone(counts: np.ndarray) -> None:
    """Lemma V.2 (a minimiser in {m_l}) and Lemma V.3 (non-decreasing in ε)."""
    info = prepare_counts(counts)
    previous = 0
    for eps in np.logspace(-5, 3, 60):
        m = opt_array_m(info, U, eps)
        assert m in set(counts.tolist())
        everywhere = min(_eq15(counts, k, eps) for k in range(info.m_min, info.m_max + 1))
        assert _eq15(counts, m, eps) <= everywhere * (1 + 1e-9)
        assert m >= previous
        previous = m


@pytest.mark.parametrize("counts", CASES, ids=str)
def test_corollary_v1_thresholds(counts: np.ndarray) -> None:
    """002 Cor V.1: m^(ε) = m_* at ε_min = m_*/(L n) and m* at ε_max = (n/(L m_*))²."""
    info = prepare_counts(counts)
    n, L, low = counts.sum(), counts.size, counts.min()
    assert opt_array_m(info, U, low / (L * n)) == low
    assert opt_array_m(info, U, (n / (L * low)) ** 2) == counts.max()
    assert opt_array_m(info, U, low / (L * n) / 10) == low


@pytest.mark.parametrize("counts", CASES, ids=str)
def test_levy_m_ub_is_eq9(counts: np.ndarray) -> None:
    info = prepare_counts(counts)
    scores = {
        m: np.minimum(counts, m).sum() / np.sqrt(m) for m in range(info.m_min, info.m_max + 1)
    }
    best = max(scores.values())
    expected = min(m for m, v in scores.items() if v >= best * (1 - 1e-12))
    assert levy_m_ub(info) == expected


@pytest.mark.parametrize("counts", CASES, ids=str)
def test_convex_surrogate_rules(counts: np.ndarray) -> None:
    """002 eq. 19: the exact rule minimises Ē; the paper rule follows Lemma VI.2's procedure."""
    info = prepare_counts(counts)
    n, L, top = counts.sum(), counts.size, counts.max()

    def surrogate(m: int) -> float:
        return 1 - np.minimum(counts, m).sum() / n + max(m, n / L) / top

    values = {m: surrogate(m) for m in range(info.m_min, info.m_max + 1)}
    exact = opt_array_convex_m(info, "exact")
    assert values[exact] <= min(values.values()) + 1e-12
    assert all(values[m] > values[exact] + 1e-12 for m in values if m < exact)
    paper = opt_array_convex_m(info, "paper")
    ranked = np.sort(counts)[::-1]
    if n % top == 0 and ranked[n // top - 1] >= n / L:
        assert paper == ranked[n // top - 1]
        assert values[paper] == pytest.approx(min(values.values()))  # a true stationary point
    else:
        ends = [info.m_min, info.m_max]
        assert paper == min(ends, key=lambda m: (values[m], m))


def test_convex_stationary_point_example() -> None:
    """Lemma VI.2 case: q = n/m* = 2 is an integer and m_q = 6 >= m̄ = 4.8."""
    counts = np.array([12, 6, 2, 2, 2])
    info = prepare_counts(counts)
    assert opt_array_convex_m(info, "paper") == 6
    assert opt_array_convex_m(info, "exact") <= 6
