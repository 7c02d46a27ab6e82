"""A seeded noise source for experiments and statistical tests (never for the service).

:class:`SeededNoise` implements :class:`app.core.noise.NoiseSource` with a numpy
``Generator``, so a run of the papers' experiments is reproducible. Releases to
users always go through :class:`app.core.noise.OpenDPNoise`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy.typing as npt

from app.core.noise import choose_index, noisy_max_log_weights

if TYPE_CHECKING:
    from numpy.random import Generator

__all__ = ["SeededNoise"]


class SeededNoise:
    """Laplace, uniform and exponential-mechanism draws from a numpy ``Generator``."""

    def __init__(self, rng: Generator) -> None:
        self.rng = rng

    def laplace(self, value: float, scale: float) -> float:
        """``value + Lap(scale)`` (``value`` itself when ``scale`` is 0)."""
        if scale == 0:
            return float(value)
        if scale < 0:
            raise ValueError(f"scale must be >= 0, got {scale!r}")
        return float(value + self.rng.laplace(0.0, scale))

    def uniform(self) -> float:
        """A uniform draw from ``[0, 1)``."""
        return float(self.rng.random())

    def exponential_choice(self, log_weights: npt.ArrayLike) -> int:
        """Index ``i`` with probability ``∝ exp(log_weights[i])`` (inverse CDF)."""
        return choose_index(log_weights, float(self.rng.random()))

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        """Index of the largest integer score by the exponential mechanism (seeded)."""
        lw = noisy_max_log_weights(scores, epsilon, sensitivity)
        return choose_index(lw, float(self.rng.random()))
