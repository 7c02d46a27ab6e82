"""Result types: a public :class:`Plan` and a noisy :class:`Release`.

Every release is finished by one rule, :func:`finished_value` (docs/math.md §4.4, §9.4.6):
the estimate projected onto the statistic's range; ``ci95`` from a worst-case bias bound
(``raw ± (b ln 20 + B)``), or from a :class:`BiasSpread` that holds with probability
``1 - β`` given the private choices, or none (levy, quantile: privately chosen
projections); an interval covering the whole range is still published, with a note.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

__all__ = [
    "LN20",
    "BiasSpread",
    "Plan",
    "Release",
    "SpreadTuple",
    "VectorRelease",
    "ci95",
    "finished_value",
    "statistic_range",
]

LN20 = math.log(20.0)

NO_INTERVAL_NOTE = (
    "No 95% interval: {mechanism} clips or projects onto a privately chosen range, "
    "so its bias has no data-independent bound and no interval can promise the coverage."
)
WHOLE_RANGE_NOTE = (
    "The 95% interval is the whole range [{lo:g}, {hi:g}]: at this epsilon and grid size "
    "the noise and what {mechanism}'s clipping or weighting may have moved (bounded from "
    "public counts) can reach every value. A larger epsilon or a coarser grid with more "
    "users gives a narrower one."
)


@functools.lru_cache(maxsize=256)
def _note(template: str, mechanism: str, lo: float = 0.0, hi: float = 0.0) -> str:
    """A ``ci95_note``, formatted once per mechanism and range (a day has 10^5 grids)."""
    return template.format(mechanism=mechanism, lo=lo, hi=hi)


def ci95(estimate: float, scale: float) -> tuple[float, float]:
    """``estimate ± b ln 20``: covers the noiseless estimate with probability 0.95."""
    half = scale * LN20
    return (estimate - half, estimate + half)


def statistic_range(statistic: str, U: float) -> tuple[float, float]:
    """``[0, U]`` for a mean (of records or of unit means), ``[0, U²/4]`` for a population
    variance."""
    if statistic in ("mean", "user_mean"):
        return 0.0, float(U)
    if statistic == "variance":
        return 0.0, float(U) * float(U) / 4.0
    raise ValueError(f"unknown statistic {statistic!r}")


@dataclass(frozen=True)
class BiasSpread:
    """``truth - noiseless estimate`` lies in ``[-below, above]`` with probability at least
    ``1 - beta`` over the mechanism's private choices, on every dataset (docs/math.md §11.6)."""

    below: float
    above: float
    beta: float

    def __post_init__(self) -> None:
        if not (self.below >= 0 and self.above >= 0 and 0 < self.beta < 0.05):
            raise ValueError(f"invalid bias spread {self}")


#: ``(below, above, beta)`` of a :class:`BiasSpread`, as a plain tuple (the batched path).
SpreadTuple = tuple[float, float, float]


@functools.lru_cache(maxsize=64)
def _spread_log(beta: float) -> float:
    return math.log(1.0 / (0.05 - beta))


def finished_value(
    statistic: str,
    mechanism: str,
    raw: float,
    scale: float,
    bias: float | None,
    spread: SpreadTuple | None,
    U: float,
) -> tuple[float, tuple[float, float] | None, str | None]:
    """``(estimate, ci95, ci95_note)`` of a raw noisy value by the rule of the module
    docstring, the one place it is written (a :class:`Release` and a release batch both
    call it; a day release calls it 2·10⁵ times, hence one plain function):

    * with a bias bound ``B``: ``raw ± (b ln 20 + B)``;
    * else with a :class:`BiasSpread`: ``[raw - q - below, raw + q + above]`` with
      ``q = b ln(1/(0.05 - beta))`` (the Laplace noise exceeds ``q`` with probability
      ``0.05 - beta`` and the spread fails with at most ``beta``: a union bound, 0.95);
    * else no interval;

    the estimate and both ends projected onto :func:`statistic_range`. An array ``raw``
    (many draws of one release: the privacy audit's bulk noise) is projected, no interval."""
    hi = float(U) if statistic == "mean" else statistic_range(statistic, U)[1]
    if isinstance(raw, np.ndarray):
        return np.clip(raw, 0.0, hi), None, None
    raw = float(raw)
    estimate = 0.0 if raw < 0.0 else (hi if raw > hi else raw)
    if bias is not None:
        half = scale * LN20 + bias
        a, b = raw - half, raw + half
    elif spread is not None:
        q = scale * _spread_log(spread[2])
        a, b = raw - q - spread[0], raw + q + spread[1]
    else:
        return estimate, None, _note(NO_INTERVAL_NOTE, mechanism)
    a = 0.0 if a < 0.0 else (hi if a > hi else a)
    b = 0.0 if b < 0.0 else (hi if b > hi else b)
    if a <= 0.0 and b >= hi:
        return estimate, (a, b), _note(WHOLE_RANGE_NOTE, mechanism, 0.0, hi)
    return estimate, (a, b), None


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


@dataclass(frozen=True, eq=False, kw_only=True)
class Release:
    """One noisy statistic of one grid and what is known about its accuracy.

    ``sensitivity`` is the user-level sensitivity of the estimator that received the
    noise, ``noise_scale`` the Laplace scale ``b`` actually used. ``kept`` as in
    :class:`Plan`. ``details`` holds JSON-serialisable scalars (``m_ub``, ``K``,
    ``interval_lo``, ``T``, ...).

    With ``value_bound`` ``U`` (the engine always gives it) the given ``estimate`` is
    the raw noisy value: it is projected onto :func:`statistic_range` and ``ci95`` /
    ``ci95_note`` are set by the rule of the module docstring (any ``ci95`` passed is
    replaced). Without it, ``estimate`` and ``ci95`` are kept as given.
    """

    statistic: str
    mechanism: str
    epsilon: float
    estimate: float
    sensitivity: float
    noise_scale: float
    worst_case_bias: float | None
    worst_case_error: float | None
    kept: np.ndarray
    ci95: tuple[float, float] | None = None
    ci95_note: str | None = None
    details: Mapping[str, object] = field(default_factory=dict)
    value_bound: float | None = None
    bias_spread: BiasSpread | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kept", _freeze_kept(self.kept))
        object.__setattr__(self, "details", _freeze(self.details))
        if self.value_bound is None:
            return
        s = self.bias_spread
        estimate, interval, note = finished_value(
            self.statistic, self.mechanism, self.estimate, self.noise_scale, self.worst_case_bias,
            None if s is None else (s.below, s.above, s.beta), self.value_bound,
        )  # fmt: skip
        object.__setattr__(self, "estimate", estimate)
        object.__setattr__(self, "ci95", interval)
        object.__setattr__(self, "ci95_note", note)


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
