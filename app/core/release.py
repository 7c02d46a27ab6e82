"""Result types: a public :class:`Plan` and a noisy :class:`Release`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

__all__ = ["LN20", "Plan", "Release", "VectorRelease", "ci95"]

LN20 = math.log(20.0)


def ci95(estimate: float, scale: float) -> tuple[float, float]:
    """``estimate ± b ln 20``: covers the noiseless estimate with probability 0.95
    (docs/math.md §4.4)."""
    half = scale * LN20
    return (estimate - half, estimate + half)


def _freeze(details: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(details))


def _freeze_kept(kept: np.ndarray) -> np.ndarray:
    k = np.array(kept, dtype=np.int64, copy=True)
    k.flags.writeable = False
    return k


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything about a release that follows from public counts, ``U`` and ``eps`` alone.

    ``kept[l]`` is ``Γ_l``, how many of user ``l``'s earliest records the estimate
    reads (0: the user is not used and must not be charged). ``sensitivity`` and
    ``noise_scale`` are ``None`` for levy and quantile, whose interval, and so
    sensitivity, is chosen privately from the values; ``worst_case_bias`` and
    ``worst_case_error`` are ``None`` where docs/math.md §3.4 gives no bound.
    """

    mechanism: str
    epsilon: float
    sensitivity: float | None
    noise_scale: float | None
    worst_case_bias: float | None
    worst_case_error: float | None
    kept: np.ndarray
    details: Mapping[str, object] = field(default_factory=dict)
    statistic: str = "mean"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kept", _freeze_kept(self.kept))
        object.__setattr__(self, "details", _freeze(self.details))


@dataclass(frozen=True, eq=False)
class Release:
    """One noisy statistic of one grid and what is known about its accuracy.

    ``sensitivity`` is the user-level sensitivity of the estimator that received the
    noise, ``noise_scale`` the Laplace scale ``b`` actually used, ``ci95`` is
    ``estimate ± b ln 20``. ``kept`` as in :class:`Plan`. ``details`` holds
    JSON-serialisable scalars (``m_ub``, ``K``, ``interval_lo``, ``T``, ...).
    """

    statistic: str
    mechanism: str
    epsilon: float
    estimate: float
    sensitivity: float
    noise_scale: float
    worst_case_bias: float | None
    worst_case_error: float | None
    ci95: tuple[float, float]
    kept: np.ndarray
    details: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kept", _freeze_kept(self.kept))
        object.__setattr__(self, "details", _freeze(self.details))


@dataclass(frozen=True, eq=False)
class VectorRelease:
    """A d-dimensional mean release (003 Thm III.1 for d >= 1): ``Lap(b)`` on each coordinate.

    ``sensitivity`` is the l1 user-level sensitivity of the estimator; the worst-case
    bias and error are l1 quantities (003 eq. 1); ``ci95`` holds one interval per
    coordinate.
    """

    mechanism: str
    epsilon: float
    estimate: np.ndarray
    sensitivity: float
    noise_scale: float
    worst_case_bias: float
    worst_case_error: float
    ci95: tuple[tuple[float, float], ...]
    kept: np.ndarray
    details: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        est = np.array(self.estimate, dtype=np.float64, copy=True)
        est.flags.writeable = False
        object.__setattr__(self, "estimate", est)
        object.__setattr__(self, "kept", _freeze_kept(self.kept))
        object.__setattr__(self, "details", _freeze(self.details))
