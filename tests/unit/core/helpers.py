"""Shared test helpers: a noise source without Laplace noise and grid builders."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core import MEAN_MECHANISMS, GridData
from app.core.data.results import Release
from research.noise import noisy_max_many

#: The engine tests' value bound, and the bounded mean mechanisms but ``auto``.
U = 65.0
BOUNDED = sorted(name for name, spec in MEAN_MECHANISMS.items() if spec.bounded and name != "auto")


class ZeroNoise:
    """Adds no Laplace noise (to read a mechanism's noiseless estimate); other draws seeded."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.scales: list[float] = []

    def laplace(self, value: float, scale: float) -> float:
        self.scales.append(scale)
        return float(value)

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        return int(noisy_max_many(self.rng, scores, epsilon, 1, sensitivity=sensitivity)[0])


def random_grid(
    rng: np.random.Generator, U: float, n_users: int = 6, max_count: int = 9
) -> GridData:
    counts = rng.integers(1, max_count + 1, size=n_users)
    return GridData.from_counts_and_values(counts, rng.uniform(0, U, size=int(counts.sum())))


def release_fields(r: Release) -> tuple[object, ...]:
    """Every published field of a release, to compare two releases bit for bit."""
    return (
        r.statistic, r.mechanism, r.epsilon, r.estimate, r.sensitivity, r.noise_scale,
        r.worst_case_bias, r.worst_case_error, r.ci95, r.ci95_note, dict(r.details),
        r.kept.tolist(),
    )  # fmt: skip
