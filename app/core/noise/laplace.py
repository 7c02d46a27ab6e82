"""Randomness for releases: OpenDP's Laplace and report-noisy-max measurements.

Mechanisms draw through a :class:`NoiseSource` (the service: :class:`OpenDPNoise`;
experiments: a seeded source). Two kinds of draw, both OpenDP measurements whose privacy
holds exactly in floating point (docs/math.md §9.1–§9.4): Laplace noise from
``make_laplace`` at the scale :func:`calibrate_scale` certifies (a slot's at once, one call
per scale, §9.4.7), and every private choice as ``make_noisy_max`` on integer scores
(exponential noise, i.e. permute-and-flip: McKenna and Sheldon, NeurIPS 2020) at the scale
:func:`calibrate_choice_scale` certifies, invoked by :mod:`app.core.noise.noisy_max_invoke`
(§9.4.8).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import opendp.prelude as dp

from app.core.noise.lean_make import lean_make_laplace, lean_make_works
from app.core.noise.measurement_cache import MeasurementCache
from app.core.noise.noisy_max_invoke import (
    invoke_noisy_max,
    invoke_noisy_max_rows,
    invoke_scalar,
    invoke_vector,
    lean_invoke_works,
)
from app.core.noise.threads import in_parallel

__all__ = [
    "LAPLACE_GRID",
    "LAPLACE_K",
    "ROUNDING_SLACK",
    "NoiseSource",
    "OpenDPNoise",
    "calibrate_choice_scale",
    "calibrate_scale",
    "check_scores",
    "default_noise",
    "laplace_many",
    "padded_sensitivity",
]

dp.enable_features("contrib")


@runtime_checkable
class NoiseSource(Protocol):
    """What the mechanisms need from a source of randomness."""

    def laplace(self, value: float, scale: float) -> float:
        """Return ``value + Lap(scale)`` (``value`` itself when ``scale`` is 0)."""
        ...

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        """Index of the largest integer score, chosen by report-noisy-max so that the choice
        is ``epsilon``-DP when each score moves by at most ``sensitivity`` between
        neighbouring datasets (OpenDP's ``make_noisy_max``; exact in floating point)."""
        ...


#: The Laplace noise grid ``2^LAPLACE_K`` (docs/math.md §9.1): OpenDP's default, the
#: smallest float step 2^-1074, makes every draw an arithmetic on 1,100-bit integers
#: (~22 µs); at 2^-100 a draw costs ~5 µs. Every double of magnitude >= 2^-48 is a
#: multiple of 2^-100, and the map's rounding slack grows by less than 2^-100 (§9.2).
LAPLACE_K = -100
LAPLACE_GRID = 2.0**LAPLACE_K  # the grid step, a float
#: The exact rounding slack OpenDP's map adds to ``d_in`` per coordinate at that grid.
ROUNDING_SLACK = Fraction(2) ** LAPLACE_K - Fraction(2) ** -1074

#: Fewer draws than this (a query's) are made on the caller's thread alone.
MIN_SPLIT = 256

# Immutable and shared: building them anew costs more than the measurement itself.
_DOMAIN = dp.atom_domain(T=float, nan=False)
_METRIC = dp.absolute_distance(T=float)
_SCORE_SPACE = (dp.vector_domain(dp.atom_domain(T="i64")), dp.linf_distance(T="i64"))
_L1 = dp.l1_distance(T=float)


@functools.lru_cache(maxsize=1024)
def _vector_domain(size: int) -> dp.Domain:
    """Float vectors of ``size`` (a release's scale groups repeat their sizes)."""
    return dp.vector_domain(_DOMAIN, size=size)


def _privacy_map(meas: dp.Measurement, d_in: float) -> float:
    """``meas.map(d_in)``: the epsilon OpenDP's privacy map charges for ``d_in``."""
    d_out: float = meas.map(d_in)  # type: ignore[no-untyped-call]  # OpenDP leaves map unannotated
    return d_out


#: OpenDP's scalar constructor with its arguments converted once (a query at a new epsilon
#: builds one), checked against the public constructor here; else the public call.
_LEAN_MAKE = lean_make_works(_DOMAIN, _METRIC, LAPLACE_K)


def _make_laplace(scale: float) -> dp.Measurement:
    if _LEAN_MAKE:
        return lean_make_laplace(_DOMAIN, _METRIC, scale, LAPLACE_K)
    return dp.m.make_laplace(_DOMAIN, _METRIC, scale, k=LAPLACE_K)


def _make_laplace_vector(key: tuple[float, int]) -> dp.Measurement:
    """``make_laplace`` on float vectors of ``size`` (OpenDP needs it off the finest grid):
    iid noise per coordinate, each with the law of :func:`_make_laplace` at ``scale``
    (docs/math.md §9.4.7)."""
    scale, size = key
    return dp.m.make_laplace(_vector_domain(size), _L1, scale, k=LAPLACE_K)


def _make_noisy_max(key: tuple[float, int, float]) -> dp.Measurement:
    """OpenDP's noisy max at ``scale``, refused unless its own privacy map certifies
    ``map(sensitivity) <= epsilon`` (fails closed; checked once per cached key)."""
    scale, sensitivity, epsilon = key
    meas = dp.m.make_noisy_max(*_SCORE_SPACE, dp.max_divergence(), scale=scale)
    if not _privacy_map(meas, sensitivity) <= epsilon:
        raise RuntimeError("OpenDP's noisy-max privacy map charges more than epsilon")
    return meas


_MEASUREMENTS: MeasurementCache[float] = MeasurementCache(_make_laplace)
_VECTORS: MeasurementCache[tuple[float, int]] = MeasurementCache(_make_laplace_vector)
_CHOICES: MeasurementCache[tuple[float, int, float]] = MeasurementCache(_make_noisy_max)


def _smallest_float_at_least(exact: Fraction, what: str) -> float:
    overflow = ValueError(f"{what} overflows")
    try:
        x = float(exact)  # round to nearest: at most one step below the exact quotient
    except OverflowError:
        raise overflow from None
    if Fraction(x) < exact:
        x = math.nextafter(x, math.inf)
    if math.isinf(x):
        raise overflow
    return x


def calibrate_scale(sensitivity: float, epsilon: float) -> float:
    """A Laplace scale whose OpenDP privacy map charges at most ``epsilon`` for
    ``sensitivity``. A zero sensitivity needs no noise: scale 0.

    OpenDP's ``make_laplace`` maps ``d_in`` to ``(d_in + ROUNDING_SLACK) / scale`` rounded
    up to a float, which is ``<= epsilon`` exactly when that quotient is as a rational.
    The answer is the smallest float ``>= Δ⁺ / epsilon`` with ``Δ⁺ = up(fl(Δ + 2^k))``,
    a float ``>= Δ + 2^k`` (docs/math.md §9.2), found exactly with
    :class:`~fractions.Fraction` — no call into OpenDP on the release path. That this
    is OpenDP's map is checked against OpenDP itself when this module is imported
    (:func:`_check_against_opendp`, which fails closed) and in the tests.
    """
    return _calibrated_scale(float(sensitivity), float(epsilon))


@functools.lru_cache(maxsize=8192)
def _calibrated_scale(sensitivity: float, epsilon: float) -> float:
    """:func:`calibrate_scale` on floats (pure, so cached: grids of a slot share scales)."""
    if not math.isfinite(sensitivity) or sensitivity < 0:
        raise ValueError(f"sensitivity must be finite and >= 0, got {sensitivity!r}")
    if sensitivity == 0.0:
        return 0.0
    _check_eps(epsilon)
    return _smallest_float_at_least(
        Fraction(padded_sensitivity(sensitivity)) / Fraction(epsilon),
        f"sensitivity / epsilon ({sensitivity!r} / {epsilon!r})",
    )


def padded_sensitivity(sensitivity: float) -> float:
    """``Δ⁺``: the next float above ``fl(Δ + 2^LAPLACE_K)``, so ``Δ⁺ >= Δ + 2^k`` exactly
    (round to nearest errs by at most half a step; docs/math.md §9.2)."""
    return math.nextafter(sensitivity + LAPLACE_GRID, math.inf)


def _check_eps(epsilon: float) -> None:
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")


def calibrate_choice_scale(sensitivity: int, epsilon: float) -> float:
    """The smallest noise scale for which ``make_noisy_max``'s privacy map charges at most
    ``epsilon`` when every score moves by at most ``sensitivity``.

    On scores that may move in both directions (``linf_distance``, not monotonic)
    OpenDP's map is ``2 d_in / scale`` rounded up to a float, so the scale is the
    smallest float ``>= 2 sensitivity / epsilon`` (computed exactly). The map itself
    is asked for every new (scale, sensitivity, epsilon) before its first draw
    (:func:`_make_noisy_max`), which fails closed.
    """
    _check_eps(float(epsilon))
    if isinstance(sensitivity, bool) or int(sensitivity) != sensitivity or sensitivity < 1:
        raise ValueError(f"score sensitivity must be an integer >= 1, got {sensitivity!r}")
    return _calibrated_choice_scale(int(sensitivity), float(epsilon))


@functools.lru_cache(maxsize=1024)
def _calibrated_choice_scale(sensitivity: int, epsilon: float) -> float:
    return _smallest_float_at_least(
        Fraction(2 * sensitivity) / Fraction(epsilon), "2 sensitivity / epsilon"
    )


def check_scores(scores: npt.ArrayLike) -> list[int]:
    """The scores as Python integers; refuses an empty, non-integer or non-finite vector."""
    s = np.asarray(scores)
    if s.ndim != 1 or s.size == 0:
        raise ValueError("noisy_max needs a non-empty 1-d vector of scores")
    if s.dtype.kind == "f":
        if not np.all(np.isfinite(s)) or np.any(s != np.round(s)):
            raise ValueError("noisy_max scores must be integers")
    elif s.dtype.kind not in "iub":
        raise ValueError(f"noisy_max scores must be integers, got dtype {s.dtype}")
    out = [int(v) for v in s.tolist()]
    if max(abs(v) for v in out) >= 1 << 62:
        raise ValueError("noisy_max scores must fit in 62 bits")
    return out


#: (sensitivity, epsilon) pairs on which the plain quotient rounds both ways.
_CHECK_PAIRS = ((1.0, 3.0), (30.0, 0.7), (0.1, 0.3), (7.0, 1e-3), (1e-3, 9.9), (2.5, 0.1))


def _opendp_rule(d_in: float, scale: float, size: int) -> float:
    """The map :func:`calibrate_scale` relies on: ``(d_in + size · ROUNDING_SLACK) / scale``
    rounded up to a float (docs/math.md §9.2), computed exactly."""
    return _smallest_float_at_least(
        (Fraction(d_in) + size * ROUNDING_SLACK) / Fraction(scale), "the expected map"
    )


def _check_against_opendp() -> None:
    """Fail closed if OpenDP's Laplace privacy map is not the rule :func:`calibrate_scale`
    relies on: at each checked pair, the scalar and vector maps at the scale and the next
    float down must be :func:`_opendp_rule` exactly, and the scale must be certified."""
    for sensitivity, epsilon in _CHECK_PAIRS:
        scale = calibrate_scale(sensitivity, epsilon)
        for s in (scale, math.nextafter(scale, 0.0)):
            maps = [(_privacy_map(_make_laplace(s), sensitivity), 1)]
            maps += [(_privacy_map(_make_laplace_vector((s, n)), sensitivity), n) for n in (1, 3)]
            if any(got != _opendp_rule(sensitivity, s, n) for got, n in maps):
                raise RuntimeError(
                    "OpenDP's Laplace privacy map changed; calibrate_scale must be revisited"
                )
        if not _privacy_map(_make_laplace(scale), sensitivity) <= epsilon:
            raise RuntimeError("OpenDP's Laplace privacy map refuses calibrate_scale")


_check_against_opendp()
_LEAN = lean_invoke_works()  # else OpenDP's public call: slower, the same law


class OpenDPNoise:
    """The release-path noise source: OpenDP's Laplace and report-noisy-max measurements."""

    def laplace(self, value: float, scale: float) -> float:
        """``value + Lap(scale)`` drawn by OpenDP's ``make_laplace`` measurement."""
        scale = _check_scale(scale)
        if scale == 0.0:
            return float(value)
        one = _MEASUREMENTS.get(scale)
        return invoke_scalar(one, float(value)) if _LEAN else float(one(float(value)))

    def laplace_many(self, values: Sequence[float], scales: Sequence[float]) -> list[float]:
        """``values[i] + Lap(scales[i])``, all independent: the draws that share a scale
        come from one call of OpenDP's ``make_laplace`` on float vectors (iid noise per
        coordinate, the scalar measurement's law: docs/math.md §9.4.7), the calls shared
        between this thread and a second one (:func:`app.core.noise.threads.in_parallel`)."""
        if len(values) != len(scales):
            raise ValueError("laplace_many needs one scale per value")
        if len(values) == 1:  # a query's one draw: the scalar measurement, as below
            return [self.laplace(values[0], scales[0])]
        out = np.array(values, dtype=np.float64)
        s = np.array(scales, dtype=np.float64)
        for scale in s[~(np.isfinite(s) & (s >= 0))][:1].tolist():
            _check_scale(scale)  # raises
        noisy = np.flatnonzero(s > 0)
        order = noisy[np.argsort(s[noisy], kind="stable")]
        cuts = np.flatnonzero(s[order][1:] != s[order][:-1]) + 1
        first, second = _balanced_halves(np.split(order, cuts) if order.size else [])

        def draw(groups: list[np.ndarray]) -> None:
            for idx in groups:
                out[idx] = self._vector(float(s[idx[0]]), out[idx])

        if noisy.size < MIN_SPLIT:  # a query's draw: not worth a thread
            draw(first + second)
        else:
            in_parallel(lambda: draw(first), lambda: draw(second))
        drawn: list[float] = out.tolist()
        return drawn

    @staticmethod
    def _vector(scale: float, values: np.ndarray) -> np.ndarray:
        """``values + Lap(scale)`` iid: OpenDP's vector measurement at ``scale``."""
        if values.size == 1:  # the scalar measurement is cheaper for one draw
            one = _MEASUREMENTS.get(scale)
            value = float(values[0])
            return np.array([invoke_scalar(one, value) if _LEAN else one(value)])
        meas = _VECTORS.get((scale, values.size))
        if _LEAN:  # the same library calls, the array's own buffer (docs/math.md §9.4.8)
            return invoke_vector(meas, values)
        return np.array(meas(values.tolist()), dtype=np.float64)

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        """Index of the largest integer score by OpenDP's ``make_noisy_max`` (exponential
        noise, exact), with the scale whose privacy map charges at most ``epsilon`` for
        scores that move by at most ``sensitivity`` (certified by the map itself)."""
        values = check_scores(scores)
        scale = calibrate_choice_scale(sensitivity, epsilon)
        meas = _CHOICES.get((scale, int(sensitivity), float(epsilon)))
        if _LEAN:  # the same library calls, types fixed once (docs/math.md §9.4.8)
            return invoke_noisy_max(meas, values)
        return int(meas(values))

    def noisy_max_rows(self, scores: np.ndarray, epsilon: float) -> np.ndarray:
        """:meth:`noisy_max` (sensitivity 1) of each row of ``scores``: one invocation of
        the same certified measurement per row (docs/math.md §9.4.9), rows checked at once."""
        rows = np.asarray(scores)
        if rows.ndim != 2 or rows.shape[1] == 0 or rows.dtype.kind not in "iu":
            raise ValueError("noisy_max_rows needs a 2-d integer array with columns")
        if rows.size and int(np.abs(rows).max()) >= 1 << 62:
            raise ValueError("noisy_max scores must fit in 62 bits")
        scale = calibrate_choice_scale(1, epsilon)
        meas = _CHOICES.get((scale, 1, float(epsilon)))
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if not _LEAN:
            return np.array([int(meas(row)) for row in rows.tolist()], dtype=np.int64)
        # The same library calls, types fixed once (docs/math.md §9.4.8). On one thread:
        # an invocation (~8 µs) is shorter than handing the GIL between two threads, so a
        # second one made this slower (docs/math.md §9.4.9).
        return np.array(invoke_noisy_max_rows(meas, rows), dtype=np.int64)


def _balanced_halves(groups: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The groups in two lists of about equal total size (largest first, to the lighter)."""
    halves: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
    sizes = [0, 0]
    for g in sorted(groups, key=len, reverse=True):
        k = 0 if sizes[0] <= sizes[1] else 1
        halves[k].append(g)
        sizes[k] += g.size
    return halves


def _check_scale(scale: float) -> float:
    scale = float(scale)
    if not math.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be finite and >= 0, got {scale!r}")
    return scale


def laplace_many(
    source: NoiseSource, values: Sequence[float], scales: Sequence[float]
) -> list[float]:
    """``values[i] + Lap(scales[i])``: batched where the source can (:class:`OpenDPNoise`),
    else one :meth:`NoiseSource.laplace` per value (seeded research sources)."""
    many = getattr(source, "laplace_many", None)
    if many is not None:
        return list(many(values, scales))
    return [source.laplace(v, s) for v, s in zip(values, scales, strict=True)]


_DEFAULT = OpenDPNoise()


def default_noise() -> OpenDPNoise:
    """The noise source every release uses unless told otherwise."""
    return _DEFAULT
