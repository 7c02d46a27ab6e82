"""The occupancies and value laws of the seed papers' experiments (docs/math.md §7): the
ITMS-like grid's scalings and speeds (002 §IV), the bounding collections (003 §IV-A) and
heavy-hitter occupancies (004 §VI-A2). Every draw comes from the seeded numpy ``Generator``
the caller hands in; nothing here is on the release path."""

from __future__ import annotations

import numpy as np

from app.core.data.grid import GridData
from app.synth.itms import (
    ITMS_MEAN,
    ITMS_U,
    ITMS_VARIANCE,
    itms_counts,
)
from app.synth.random_source import SynthRandom

SCALING_LAMBDA = 10


# ------------------------------------------------------------ the ITMS-like grid (002 §IV)
def check_itms_counts(counts: np.ndarray) -> dict[str, int]:
    """The 002 §IV-B facts of ``counts``: ``L, m*, m_*, n, median, K, K_bar``."""
    from app.core.data.counts import prepare_counts
    from app.core.mechanisms.grouping import bestfit, levy_m_ub, wraparound

    info = prepare_counts(counts)
    m_ub = levy_m_ub(info)
    return {
        "L": info.n_active,
        "m_max": info.m_max,
        "m_min": info.m_min,
        "n": info.n,
        "median": info.median(),
        "m_ub_eq9": m_ub,
        "K": wraparound(info, m_ub).k,
        "K_bar": bestfit(info, m_ub).k_bar,
    }


def _scale(lam: int) -> int:
    if int(lam) != lam or lam < 1:
        raise ValueError(f"lambda must be a positive integer, got {lam!r}")
    return int(lam)


def sample_scaled(counts: np.ndarray, lam: int = SCALING_LAMBDA) -> np.ndarray:
    """Sample scaling (002 §IV-C 1): every user contributes ``λ m_l`` records."""
    return np.asarray(counts, dtype=np.int64) * _scale(lam)


def user_scaled(counts: np.ndarray, lam: int = SCALING_LAMBDA) -> np.ndarray:
    """User scaling (002 §IV-C 2): each user repeated ``λ`` times (``λ L`` users)."""
    return np.repeat(np.asarray(counts, dtype=np.int64), _scale(lam))


def projected_normal(
    rng: SynthRandom,
    size: int | tuple[int, ...],
    *,
    mean: float = ITMS_MEAN,
    variance: float = ITMS_VARIANCE,
    U: float = ITMS_U,
) -> np.ndarray:
    """``Π_[0,U](X)``, ``X ~ N(mean, variance)`` i.i.d. (002 §IV-C): clipped, not rejected.

    Mass ``Q(μ/σ)`` lands exactly on 0 and ``Q((U-μ)/σ)`` on ``U`` (002 §IV-C).
    """
    if variance < 0:
        raise ValueError("variance must be >= 0")
    x = np.asarray(rng.normal(mean, np.sqrt(variance), size=size), dtype=np.float64)
    return np.clip(x, 0.0, U)


def itms_grid(
    rng: SynthRandom,
    counts: np.ndarray | None = None,
    *,
    mean: float = ITMS_MEAN,
    variance: float = ITMS_VARIANCE,
    U: float = ITMS_U,
) -> GridData:
    """One synthetic ITMS-like grid (002 §IV-C): ``counts`` (default :func:`itms_counts`)
    with i.i.d. projected-normal speeds."""
    c = itms_counts() if counts is None else np.asarray(counts, dtype=np.int64)
    values = projected_normal(rng, int(c.sum()), mean=mean, variance=variance, U=U)
    return GridData.from_counts_and_values(c, values)


# ------------------------------------------ bounding collections (003 §IV-A)
BOUNDING_U = 65.0


def geometric_collection(M: int = 6) -> np.ndarray:
    """003 §IV-A 1: ``2^i`` users with ``2^{M-i}`` records, ``i = 0..M`` (largest first)."""
    if int(M) != M or M < 0 or M > 24:
        raise ValueError(f"M must be an integer in [0, 24], got {M!r}")
    M = int(M)
    return np.concatenate([np.full(2**i, 2 ** (M - i), dtype=np.int64) for i in range(M + 1)])


def extreme_collection(L: int = 101, m_star: int = 10) -> np.ndarray:
    """003 §IV-A 2: one user with ``m*`` records, ``L - 1`` users with one each."""
    if int(L) != L or L < 2:
        raise ValueError(f"L must be an integer >= 2, got {L!r}")
    if int(m_star) != m_star or m_star < 2:
        raise ValueError(f"m_star must be an integer > 1, got {m_star!r}")
    counts = np.ones(int(L), dtype=np.int64)
    counts[0] = int(m_star)
    return counts


def uniform_values(
    rng: SynthRandom, size: int | tuple[int, ...], U: float = BOUNDING_U
) -> np.ndarray:
    """I.i.d. ``Unif((0, U])`` (003 §IV-A): ``U (1 - V)`` with ``V`` uniform on ``[0, 1)``."""
    return U * (1.0 - np.asarray(rng.random(size), dtype=np.float64))


def truncated_normal_values(
    rng: SynthRandom,
    size: int | tuple[int, ...],
    U: float = BOUNDING_U,
    *,
    mean: float | None = None,
    variance: float | None = None,
) -> np.ndarray:
    """I.i.d. ``N(mean, variance)`` conditioned on ``(0, U]`` by rejection (003 §IV-A).

    Defaults are 003's ``mean = U/2``, ``variance = U/4``. Rejected draws are
    redrawn (only those) until every entry lies in ``(0, U]``.
    """
    mu = U / 2.0 if mean is None else float(mean)
    var = U / 4.0 if variance is None else float(variance)
    if var <= 0:
        raise ValueError("variance must be > 0")
    sd = float(np.sqrt(var))
    x = np.asarray(rng.normal(mu, sd, size=size), dtype=np.float64)
    bad = (x <= 0.0) | (x > U)
    for _ in range(10_000):
        k = int(bad.sum())
        if k == 0:
            return x
        x[bad] = np.asarray(rng.normal(mu, sd, size=k), dtype=np.float64)
        bad = (x <= 0.0) | (x > U)
    raise RuntimeError("rejection sampling did not finish: (0, U] has too little mass")


# ------------------------------------------ heavy hitters (004 §VI-A2)
def heavy_hitter_occupancy(
    gamma: float, rng: SynthRandom, *, G: int = 12, q: float = 0.01
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw one heavy-hitter occupancy (004 §VI-A2 steps i–iii, docs/math.md §7.2).

    Args:
        gamma: heavy-hitter factor ``γ >= 0``; the top count of each grid becomes
            ``round((1 + γ) m)`` (nearest integer, ties to even). 004 uses ``γ ∈ {3, 6, 9}``.
        rng: a seeded numpy ``Generator`` (``default_rng(seed)``).
        G: number of grids (grid ids ``0..G-1``); users are ``1..2^G - 1``.
        q: success probability of the geometric counts, ``0 < q <= 1``.

    Returns:
        ``(grids, users, counts)``: int64 arrays, one row per occupied pair, sorted
        by user then grid. When several users tie for a grid's top count, the
        smallest user id is scaled (004 picks "a single user" in the argmax).
    """
    if not isinstance(G, int | np.integer) or not 1 <= G <= 30:
        raise ValueError(f"G must be an integer in [1, 30], got {G!r}")
    gamma = float(gamma)
    if not np.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be finite and >= 0, got {gamma!r}")
    q = float(q)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"q must be in (0, 1], got {q!r}")
    G = int(G)
    L = 2**G - 1
    users_all = np.arange(1, L + 1, dtype=np.int64)
    # User l in [2^j, 2^{j+1}) has j = floor(log2 l) and occupies G - j grids.
    j = np.floor(np.log2(users_all)).astype(np.int64)
    k = G - j
    # A uniform k-subset of the grids: the first k of a uniform random permutation.
    perm = np.argsort(np.asarray(rng.random((L, G))), axis=1)
    take = np.arange(G)[None, :] < k[:, None]
    grids = np.sort(np.where(take, perm, G), axis=1)[take]  # row-major: user by user
    users = np.repeat(users_all, k)
    counts = np.asarray(rng.geometric(q, size=grids.size), dtype=np.int64)

    # Scale the top contributor of each grid (ties: smallest user id).
    order = np.lexsort((users, -counts, grids))
    first = np.ones(order.size, dtype=bool)
    first[1:] = grids[order][1:] != grids[order][:-1]
    top_rows = order[first]
    counts[top_rows] = np.rint((1.0 + gamma) * counts[top_rows]).astype(np.int64)
    return grids.astype(np.int64), users, counts
