"""Numerical optimisation over the box ``[0, U]^n``, independent of the closed forms.

``maximise`` maximises ``Σ_t c_t f(values of the groups in term t)`` where ``f`` is a
mean or a population variance and the variables come in groups (e.g. "the other
users' records", "user l's records in x", "user l's records in x'"). It evaluates
every corner of the box up to permutations inside a group (all numbers of
``U``-valued entries per group), then polishes the best corners and a few uniform
random starts with L-BFGS-B. Nothing here knows a sensitivity or bias formula.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize

Term = tuple[float, tuple[int, ...]]


def _f(stat: str, x: np.ndarray) -> np.ndarray:
    return x.mean(axis=-1) if stat == "mean" else x.var(axis=-1)


def _grad(stat: str, x: np.ndarray) -> np.ndarray:
    if stat == "mean":
        return np.full(x.shape, 1.0 / x.shape[-1])
    return 2.0 * (x - x.mean()) / x.size


def maximise(
    stat: str,
    sizes: Sequence[int],
    terms: Sequence[Term],
    U: float,
    rng: np.random.Generator,
    *,
    restarts: int = 3,
    polish: int = 3,
) -> float:
    """The maximum found of ``Σ_t c_t f(groups of t)`` over ``[0, U]^{Σ sizes}``."""
    sizes = [int(s) for s in sizes]
    dim = sum(sizes)
    cuts = np.cumsum([0, *sizes])
    idx = [np.concatenate([np.arange(cuts[g], cuts[g + 1]) for g in groups]) for _, groups in terms]

    def value(z: np.ndarray) -> np.ndarray:
        return sum(c * _f(stat, z[..., i]) for (c, _), i in zip(terms, idx, strict=True))

    def neg(z: np.ndarray) -> tuple[float, np.ndarray]:
        grad = np.zeros(dim)
        for (c, _), i in zip(terms, idx, strict=True):
            grad[i] += c * _grad(stat, z[i])
        return -float(value(z)), -grad

    ks = np.array(list(itertools.product(*[range(s + 1) for s in sizes])))
    corners = np.zeros((ks.shape[0], dim))
    for g, s in enumerate(sizes):
        pos = np.arange(s)
        corners[:, cuts[g] : cuts[g + 1]] = U * (pos[None, :] < ks[:, g : g + 1])
    vals = value(corners)
    best = float(vals.max())
    starts = [corners[i] for i in np.argsort(-vals)[:polish]]
    starts += [rng.uniform(0.0, U, dim) for _ in range(restarts)]
    for z0 in starts:
        res = minimize(neg, z0, jac=True, method="L-BFGS-B", bounds=[(0.0, U)] * dim)
        best = max(best, -float(res.fun))
    return best


def sensitivity(stat: str, counts: Sequence[int], U: float, rng: np.random.Generator) -> float:
    """``max |f(x) - f(x')|`` over datasets differing in one user's values (replace model)."""
    n = int(sum(counts))
    best = 0.0
    for m in sorted({int(c) for c in counts if c > 0}):
        # groups: 0 = other users' records, 1 = the user's records in x, 2 = in x'
        best = max(best, maximise(stat, [n - m, m, m], [(1.0, (0, 1)), (-1.0, (0, 2))], U, rng))
    return best


def clip_bias(stat: str, kept: int, total: int, U: float, rng: np.random.Generator) -> float:
    """``max |f(all records) - f(kept records)|``; groups: 0 = kept, 1 = dropped."""
    sizes = [kept, total - kept]
    up = maximise(stat, sizes, [(1.0, (0, 1)), (-1.0, (0,))], U, rng)
    down = maximise(stat, sizes, [(-1.0, (0, 1)), (1.0, (0,))], U, rng)
    return max(up, down)
