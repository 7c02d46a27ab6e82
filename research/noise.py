"""A seeded noise source for experiments and statistical tests (never for the service).

:class:`SeededNoise` implements :class:`app.core.noise.laplace.NoiseSource` with a numpy
``Generator``, so a run of the papers' experiments is reproducible. Releases to
users always go through :class:`app.core.noise.laplace.OpenDPNoise`.

Its ``noisy_max`` has the law of the service's: report-noisy-max with exponential
noise of scale ``2·sensitivity/ε`` (permute-and-flip), only drawn in floating
point from the seeded generator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from app.core.noise.laplace import calibrate_choice_scale, check_scores

if TYPE_CHECKING:
    from numpy.random import Generator

__all__ = ["SeededNoise", "noisy_max_many"]


def noisy_max_many(
    rng: Generator, scores: npt.ArrayLike, epsilon: float, runs: int, *, sensitivity: int = 1
) -> np.ndarray:
    """``runs`` independent report-noisy-max choices (exponential noise) on one score vector."""
    s = np.asarray(check_scores(scores), dtype=np.float64)
    scale = calibrate_choice_scale(sensitivity, epsilon)
    noisy = s + rng.exponential(scale, size=(runs, s.size))
    return np.argmax(noisy, axis=1)


class SeededNoise:
    """Laplace and report-noisy-max draws from a numpy ``Generator``."""

    def __init__(self, rng: Generator) -> None:
        self.rng = rng

    def laplace(self, value: float, scale: float) -> float:
        """``value + Lap(scale)`` (``value`` itself when ``scale`` is 0)."""
        if scale == 0:
            return float(value)
        if scale < 0:
            raise ValueError(f"scale must be >= 0, got {scale!r}")
        return float(value + self.rng.laplace(0.0, scale))

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        """Report-noisy-max with exponential noise of scale ``2·sensitivity/ε``."""
        return int(noisy_max_many(self.rng, scores, epsilon, 1, sensitivity=sensitivity)[0])
