"""Statistical privacy audit of ``user_window`` (mean) and ``window`` (variance).

Neighbouring grids (same occupancy; the heaviest user's values all moved from 0 to U)
are released through the production path (``release_mean`` / ``release_variance``
with :class:`app.core.noise.OpenDPNoise`). Each release's whole output (window and
estimate) is encoded as "the estimate if the window is the most likely one, else a
sentinel" — a post-processing, so a loss bound on the encoding bounds the
mechanism's — and the loss is bounded from below with Clopper–Pearson intervals
(:func:`tests.security.audit_lib.loss_lower_bound`, alpha = 0.01 over both audits).
It must stay below eps; a deliberately broken copy (Laplace scale × 0.4: it spends
2.5× the noise share) must be caught with the same number of samples.

For the variance the other users sit at 0: with them spread out the heavy user's move
changes the variance far less than its sensitivity and no audit could tell a broken
copy (a first version, with the mean's neighbours, found a loss of only 0.41).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app.core import GridData, release_mean, release_variance
from app.core.noise import OpenDPNoise
from tests.security import audit_lib as audit

U = 10.0
EPS = 3.0
COUNTS = (6, *(1 + (i % 3) for i in range(19)))  # L = 20, the heavy user first
N = 30_000
ALPHA_EACH = 0.01 / 4  # two statistics, each audited and broken
SENTINEL = 1e300


def _grid(heavy: float, stat: str = "mean") -> GridData:
    """The heavy user's records all at ``heavy``; for the variance the others sit at 0, so
    that the move realises the variance's sensitivity ``b² w*(1 - w*)``."""
    users = [[heavy] * COUNTS[0]]
    level = 0.0 if stat == "variance" else 1.0
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


def _release(stat: str, grid: GridData, noise: Any) -> Any:
    if stat == "mean":
        return release_mean(grid, U, EPS, "user_window", noise=noise)
    return release_variance(grid, U, EPS, "window", noise=noise)


def _samples(stat: str, heavy: float, cell: float, n: int, factor: float) -> np.ndarray:
    noise = _Scaled(OpenDPNoise(), factor)
    out = np.empty(n)
    for i in range(n):
        rel = _release(stat, _grid(heavy, stat), noise)
        out[i] = rel.estimate if rel.details["window_hi"] == cell else SENTINEL
    return out


def _cell(stat: str) -> tuple[float, float, float, float]:
    """The most frequent window of side 0 (from 400 pilot draws) and, in that cell, the
    noiseless estimates of both sides and the Laplace scale."""
    grid = _grid(0.0, stat)
    pilot = [_release(stat, grid, OpenDPNoise()).details["window_hi"] for _ in range(400)]
    vals, counts = np.unique(pilot, return_counts=True)
    cell = float(vals[np.argmax(counts)])

    class Fixed(audit.RecordingNoise):
        def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
            return 0

    found = []
    for heavy in (0.0, U):
        rel = None
        for j in range(5):
            rec = Fixed()
            rec.noisy_max = lambda s, e, *, sensitivity=1, j=j: j  # type: ignore[method-assign]
            rel = _release(stat, _grid(heavy, stat), rec)
            if rel.details["window_hi"] == cell:
                found.append(rec.value)
                break
        assert rel is not None
    return cell, found[0], found[1], rel.noise_scale


@pytest.mark.slow
@pytest.mark.parametrize("stat", ["mean", "variance"])
def test_window_audit_passes_and_catches_a_broken_copy(stat: str) -> None:
    cell, v0, v1, scale = _cell(stat)
    assert v0 != v1  # the heavy user's move changes the estimate in the audited cell
    edges = audit.fixed_edges(v0, v1, scale)
    x0, x1 = _samples(stat, 0.0, cell, N, 1.0), _samples(stat, U, cell, N, 1.0)
    assert min(np.mean(x0 < SENTINEL), np.mean(x1 < SENTINEL)) > 0.1
    ok = audit.loss_lower_bound(x0, x1, edges, ALPHA_EACH)
    print(f"\naudit {stat} window: loss >= {ok.bound:.3f} (eps {EPS})")
    assert ok.bound <= EPS, ok
    b0, b1 = _samples(stat, 0.0, cell, N, 0.4), _samples(stat, U, cell, N, 0.4)
    broken = audit.loss_lower_bound(b0, b1, edges, ALPHA_EACH)
    print(f"audit {stat} window [noise scale x 0.4]: loss >= {broken.bound:.3f}")
    assert broken.bound > EPS, broken
