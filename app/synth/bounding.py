"""The count collections and value laws of seed 003's bounding experiments (docs/math.md §7.3).

003 §IV-A (Figs. 2–3) writes ``N(μ, v)`` with ``v`` the *variance* (its §II notation), so the
projected Gaussian's standard deviation is ``√(U/4) ≈ 4.03`` for ``U = 65``. Counts are returned
largest first; values with shape ``size``, so an experiment draws many data sets at once.
"""

from __future__ import annotations

import numpy as np

from app.synth.random_source import SynthRandom

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
