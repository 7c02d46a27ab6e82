"""Statistical privacy audit of ``user_window`` (mean), ``window`` and ``centred``
(variance).

Neighbouring grids (same occupancy; the heaviest user's values all moved from 0 to U)
are released through the production path (``release_mean`` / ``release_variance``
with :class:`app.core.noise.laplace.OpenDPNoise`). Each release's whole output (private
choices and estimate) is encoded as "the estimate if the choices are the most likely
ones, else a sentinel" — a post-processing, so a loss bound on the encoding bounds the
mechanism's — and the loss is bounded from below with Clopper–Pearson intervals
(:func:`tests.security.audit_lib.loss_lower_bound`, alpha = 0.01 over all six, each
check failing only when two independent samples both fail it, :mod:`tests.unseeded`).
It must stay below eps; a deliberately broken copy (Laplace scale × 0.4, × 0.25 for
centred whose Laplace step has half of eps) must be caught with as many samples.

For the variances the other users sit at 0: with them spread out the heavy user's move
changes the variance far less than its sensitivity and no audit could tell a broken
copy (a first version, with the mean's neighbours, found a loss of only 0.41).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app.core import GridData, release_mean, release_variance
from app.core.noise.laplace import OpenDPNoise
from tests.security import audit_lib as audit
from tests.unseeded import fails_only_twice

U = 10.0
EPS = 3.0
COUNTS = (6, *(1 + (i % 3) for i in range(19)))  # L = 20, the heavy user first
N = 30_000
ALPHA_EACH = 0.01 / 6  # three mechanisms, each audited and broken
SENTINEL = 1e300


def _grid(heavy: float, stat: str = "mean") -> GridData:
    """The heavy user's records all at ``heavy``; for the variances the others sit at 0, so
    that the move comes close to the variance's sensitivity."""
    users = [[heavy] * COUNTS[0]]
    level = 1.0 if stat == "mean" else 0.0
    users += [[level * U * (0.1 + 0.02 * (i % 7))] * c for i, c in enumerate(COUNTS[1:])]
    return GridData.from_counts_and_values(COUNTS, np.concatenate(users))


@dataclass
class _Scaled:
    inner: Any
    factor: float

    def laplace(self, value: float, scale: float) -> float:
        return float(self.inner.laplace(value, scale * self.factor))

    def uniform(self) -> float:
        return float(self.inner.uniform())

    def exponential_choice(self, log_weights: npt.ArrayLike) -> int:
        return int(self.inner.exponential_choice(log_weights))

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        return int(self.inner.noisy_max(scores, epsilon, sensitivity=sensitivity))


_KEYS = {"mean": ("window_hi",), "variance": ("window_hi",), "centred": ("centre", "moment_clip")}
_CHOICES = {"mean": (5,), "variance": (5,), "centred": (33, 14)}
# The broken copies' Laplace scale factor: centred's Laplace step has only half of eps.
_BROKEN = {"mean": 0.4, "variance": 0.4, "centred": 0.25}


def _release(stat: str, grid: GridData, noise: Any) -> Any:
    if stat == "mean":
        return release_mean(grid, U, EPS, "user_window", noise=noise)
    if stat == "variance":
        return release_variance(grid, U, EPS, "window", noise=noise)
    return release_variance(grid, U, EPS, "centred", noise=noise)


def _key(stat: str, rel: Any) -> tuple[float, ...]:
    return tuple(float(rel.details[k]) for k in _KEYS[stat])


def _samples(stat: str, heavy: float, cell: tuple, n: int, factor: float) -> np.ndarray:
    noise = _Scaled(OpenDPNoise(), factor)
    grid = _grid(heavy, stat)
    out = np.empty(n)
    for i in range(n):
        rel = _release(stat, grid, noise)
        out[i] = rel.estimate if _key(stat, rel) == cell else SENTINEL
    return out


class _Fixed(audit.RecordingNoise):
    """No noise; the private choices return the given indices in turn."""

    def __init__(self, picks: tuple[int, ...]) -> None:
        self.picks = list(picks)

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        return self.picks.pop(0)


def _cell(stat: str) -> tuple[tuple, float, float, float]:
    """The most frequent private choices of side 0 (from 400 pilot draws) and, in that
    cell, the noiseless estimates of both sides and the Laplace scale."""
    grid = _grid(0.0, stat)
    pilot = [_key(stat, _release(stat, grid, OpenDPNoise())) for _ in range(400)]
    keys, counts = np.unique(np.array(pilot), axis=0, return_counts=True)
    cell = tuple(float(x) for x in keys[np.argmax(counts)])
    found = []
    scale = 0.0
    for heavy in (0.0, U):
        for picks in itertools.product(*(range(c) for c in _CHOICES[stat])):
            rec = _Fixed(picks)
            rel = _release(stat, _grid(heavy, stat), rec)
            if _key(stat, rel) == cell:
                found.append(rec.value)
                scale = rel.noise_scale
                break
    assert len(found) == 2
    return cell, found[0], found[1], scale


@pytest.mark.slow
@pytest.mark.parametrize("stat", ["mean", "variance", "centred"])
def test_window_audit_passes_and_catches_a_broken_copy(stat: str) -> None:
    cell, v0, v1, scale = _cell(stat)
    assert v0 != v1  # the heavy user's move changes the estimate in the audited cell
    edges = audit.fixed_edges(v0, v1, scale)
    f = _BROKEN[stat]

    def check(factor: float) -> list[str]:
        x0, x1 = _samples(stat, 0.0, cell, N, factor), _samples(stat, U, cell, N, factor)
        assert min(np.mean(x0 < SENTINEL), np.mean(x1 < SENTINEL)) > 0.1
        result = audit.loss_lower_bound(x0, x1, edges, ALPHA_EACH)
        print(f"\naudit {stat} window [noise scale x {factor}]: loss >= {result.bound:.3f}")
        caught = result.bound > EPS
        return [] if caught == (factor != 1.0) else [str(result)]

    fails_only_twice(lambda: check(1.0))  # at most eps
    fails_only_twice(lambda: check(f))  # the broken copy: above eps
