"""Randomness for releases: OpenDP's Laplace sampler and an OS-CSPRNG for the rest.

Every mechanism draws its randomness through a :class:`NoiseSource`, so that
experiments can pass a seeded source (``app.experiments.noise.SeededNoise``) while
the service always uses :class:`OpenDPNoise`:

* Laplace noise comes from OpenDP's ``make_laplace`` measurement (a CSPRNG and a
  discrete output grid, safe against floating-point attacks). Its scale is chosen
  by :func:`calibrate_scale` so that the measurement's privacy map charges at most
  the ``eps`` the release is charged (SPEC §1).
* The exponential-mechanism draws of the private interval and the private quantile
  and the uniform draw inside a quantile gap use 53-bit uniforms from
  :mod:`secrets` (the operating system's CSPRNG).
"""

from __future__ import annotations

import math
import secrets
import threading
from collections import OrderedDict
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import opendp.prelude as dp

__all__ = [
    "NoiseSource",
    "OpenDPNoise",
    "calibrate_scale",
    "choose_index",
    "default_noise",
]

dp.enable_features("contrib")

_TWO_53 = float(1 << 53)


@runtime_checkable
class NoiseSource(Protocol):
    """What the mechanisms need from a source of randomness."""

    def laplace(self, value: float, scale: float) -> float:
        """Return ``value + Lap(scale)`` (``value`` itself when ``scale`` is 0)."""
        ...

    def uniform(self) -> float:
        """Return a uniform draw from ``[0, 1)``."""
        ...

    def exponential_choice(self, log_weights: npt.ArrayLike) -> int:
        """Return index ``i`` with probability ``∝ exp(log_weights[i])`` (``-inf`` = never)."""
        ...

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        """Index of the largest integer score, chosen by report-noisy-max so that the choice is
        epsilon-DP when each score moves by at most `sensitivity` between neighbouring
        datasets (OpenDP's make_noisy_max; exact in floating point)."""
        ...


def choose_index(log_weights: npt.ArrayLike, u: float) -> int:
    """Inverse-CDF draw: the index whose cumulative weight interval holds ``u`` in ``[0, 1)``.

    Computed in log space (weights shifted by their maximum before ``exp``), so large
    or very negative log-weights neither overflow nor all underflow.
    """
    lw = np.asarray(log_weights, dtype=np.float64).reshape(-1)
    if lw.size == 0:
        raise ValueError("need at least one candidate")
    if np.any(np.isnan(lw)) or np.any(lw == np.inf):
        raise ValueError("log-weights must be finite or -inf")
    top = float(lw.max())
    if top == -np.inf:
        raise ValueError("every candidate has weight 0")
    cdf = np.cumsum(np.exp(lw - top))
    idx = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    if idx >= lw.size:  # u * total rounded up to total: take the last positive weight
        idx = int(np.flatnonzero(lw > -np.inf)[-1])
    return idx


class _MeasurementCache:
    """A small thread-safe LRU of OpenDP Laplace measurements keyed by scale."""

    def __init__(self, maxsize: int = 512) -> None:
        self._items: OrderedDict[float, dp.Measurement] = OrderedDict()
        self._lock = threading.Lock()
        self._maxsize = maxsize

    def get(self, scale: float) -> dp.Measurement:
        with self._lock:
            meas = self._items.get(scale)
            if meas is not None:
                self._items.move_to_end(scale)
                return meas
        meas = _make_laplace(scale)
        with self._lock:
            self._items[scale] = meas
            if len(self._items) > self._maxsize:
                self._items.popitem(last=False)
        return meas

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


# Immutable and shared: building them anew costs more than the measurement itself.
_DOMAIN = dp.atom_domain(T=float, nan=False)
_METRIC = dp.absolute_distance(T=float)


def _make_laplace(scale: float) -> dp.Measurement:
    return dp.m.make_laplace(_DOMAIN, _METRIC, scale)


_MEASUREMENTS = _MeasurementCache()


def calibrate_scale(sensitivity: float, epsilon: float) -> float:
    """The smallest Laplace scale whose OpenDP privacy map charges at most ``epsilon``
    for ``sensitivity`` (SPEC §1). A zero sensitivity needs no noise: scale 0.

    OpenDP's ``make_laplace`` maps ``d_in`` to ``d_in / scale`` rounded up to a float,
    which is ``<= epsilon`` exactly when ``d_in / scale <= epsilon`` as rationals. So
    the answer is the smallest float ``>= sensitivity / epsilon``, found exactly with
    :class:`~fractions.Fraction` — no call into OpenDP on the release path. That this
    is OpenDP's rule is checked against OpenDP itself when this module is imported
    (:func:`_check_against_opendp`, which fails closed) and in the tests.
    """
    sensitivity = float(sensitivity)
    epsilon = float(epsilon)
    if not math.isfinite(sensitivity) or sensitivity < 0:
        raise ValueError(f"sensitivity must be finite and >= 0, got {sensitivity!r}")
    if sensitivity == 0.0:
        return 0.0
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    exact = Fraction(sensitivity) / Fraction(epsilon)
    overflow = ValueError(f"sensitivity / epsilon overflows: {sensitivity!r} / {epsilon!r}")
    try:
        scale = float(exact)  # round to nearest: at most one step below the exact quotient
    except OverflowError:
        raise overflow from None
    if Fraction(scale) < exact:
        scale = math.nextafter(scale, math.inf)
    if math.isinf(scale):
        raise overflow
    return scale


#: (sensitivity, epsilon) pairs on which the plain quotient rounds both ways.
_CHECK_PAIRS = ((1.0, 3.0), (30.0, 0.7), (0.1, 0.3), (7.0, 1e-3), (1e-3, 9.9), (2.5, 0.1))


def _check_against_opendp() -> None:
    """Fail closed if OpenDP's privacy map is not the rule :func:`calibrate_scale` uses:
    at each checked pair the scale must be certified and the next float down refused."""
    for sensitivity, epsilon in _CHECK_PAIRS:
        scale = calibrate_scale(sensitivity, epsilon)
        below = math.nextafter(scale, 0.0)
        if not (
            _make_laplace(scale).map(sensitivity) <= epsilon
            and _make_laplace(below).map(sensitivity) > epsilon
        ):
            raise RuntimeError(
                "OpenDP's Laplace privacy map changed; calibrate_scale must be revisited"
            )


_check_against_opendp()


def _secure_uniform() -> float:
    return secrets.randbits(53) / _TWO_53


class OpenDPNoise:
    """The release-path noise source: OpenDP Laplace plus OS-CSPRNG uniforms."""

    def laplace(self, value: float, scale: float) -> float:
        """``value + Lap(scale)`` drawn by OpenDP's ``make_laplace`` measurement."""
        scale = float(scale)
        if scale == 0.0:
            return float(value)
        if not math.isfinite(scale) or scale < 0:
            raise ValueError(f"scale must be finite and >= 0, got {scale!r}")
        return float(_MEASUREMENTS.get(scale)(float(value)))

    def uniform(self) -> float:
        """A uniform draw from ``[0, 1)`` with 53 random bits from :mod:`secrets`."""
        return _secure_uniform()

    def exponential_choice(self, log_weights: npt.ArrayLike) -> int:
        """Index ``i`` with probability ``∝ exp(log_weights[i])``, via :func:`choose_index`."""
        return choose_index(log_weights, _secure_uniform())

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        """Stand-in (the sampler work replaces it with OpenDP's exact noisy max): the
        exponential mechanism ``∝ exp(ε·score/(2·sensitivity))`` on integer scores."""
        return choose_index(noisy_max_log_weights(scores, epsilon, sensitivity), _secure_uniform())


def noisy_max_log_weights(scores: npt.ArrayLike, epsilon: float, sensitivity: int) -> np.ndarray:
    """Log-weights ``ε·score/(2·sensitivity)`` of the exponential mechanism on integer scores."""
    s = np.asarray(scores)
    if s.ndim != 1 or s.size == 0 or not np.issubdtype(s.dtype, np.integer):
        raise ValueError("scores must be a non-empty 1-d array of integers")
    if int(sensitivity) < 1 or not math.isfinite(epsilon) or epsilon <= 0:
        raise ValueError("need sensitivity >= 1 and a finite epsilon > 0")
    return float(epsilon) * s.astype(np.float64) / (2.0 * int(sensitivity))


_DEFAULT = OpenDPNoise()


def default_noise() -> OpenDPNoise:
    """The noise source every release uses unless told otherwise."""
    return _DEFAULT
