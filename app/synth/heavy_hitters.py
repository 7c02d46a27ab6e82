"""Heavy-hitter occupancies of 004 §VI-A2, as docs/math.md §7.2 states them (counts ``Geo(q)``
on ``{1, 2, ...}``: ``P[m] = q (1-q)^{m-1}``). Only the occupancy is generated: values do not
matter for worst-case errors (004 §VI-A2).
"""

from __future__ import annotations

import numpy as np

from app.synth.random_source import SynthRandom


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
