"""Shared test helpers: a noise source without Laplace noise and grid builders."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core import GridData
from app.core.noise import choose_index, noisy_max_log_weights


class ZeroNoise:
    """Adds no Laplace noise (to read a mechanism's noiseless estimate); other draws seeded."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.scales: list[float] = []

    def laplace(self, value: float, scale: float) -> float:
        self.scales.append(scale)
        return float(value)

    def uniform(self) -> float:
        return float(self.rng.random())

    def exponential_choice(self, log_weights: npt.ArrayLike) -> int:
        return choose_index(log_weights, float(self.rng.random()))

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        lw = noisy_max_log_weights(scores, epsilon, sensitivity)
        return choose_index(lw, float(self.rng.random()))


def random_grid(
    rng: np.random.Generator, U: float, n_users: int = 6, max_count: int = 9
) -> GridData:
    counts = rng.integers(1, max_count + 1, size=n_users)
    return GridData.from_counts_and_values(counts, rng.uniform(0, U, size=int(counts.sum())))
