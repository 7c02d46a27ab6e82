"""The statistical privacy audit's machinery (kept light so worker processes start fast).

* :class:`BulkOpenDPNoise` is a :class:`~app.core.noise.laplace.NoiseSource` whose ``laplace``
  returns ``n`` independent draws at once from OpenDP's ``make_laplace`` on a
  *vector* domain: the same measurement family as production's scalar
  ``make_laplace`` (same discretisation ``k = LAPLACE_K``, same discrete-Laplace sampler),
  only called once for ``n`` copies of the value. Passed as ``noise=`` to
  ``app.core.release_mean`` / ``release_variance``, the engine's release path then
  returns a :class:`~app.core.Release` whose ``estimate`` is the array of ``n``
  releases. ``test_privacy_audit`` checks with a KS test that this has the law of
  the production :class:`~app.core.noise.laplace.OpenDPNoise`.
* :class:`ScaledNoise` wraps a source and multiplies every Laplace scale: it is how
  the audit builds deliberately broken mechanisms without touching app code.
* :func:`loss_lower_bound` is the audit proper: fixed bins, Clopper–Pearson
  intervals, Bonferroni over every event tested.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import opendp.prelude as dp
from scipy import stats

from app import core
from app.core import GridData
from app.core.noise.laplace import LAPLACE_K

dp.enable_features("contrib")

U = 10.0
EPS = 0.5
# One heavy user (m* = 20) and a tail of light ones: n = 51, L = 14, mean count 51/14.
COUNTS = (20, 5, 5, 4, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1)
HEAVY = 0  # the user whose values move from 0 to U between the neighbours


class BulkOpenDPNoise:
    """``laplace(value, scale)`` -> an array of ``n`` draws of OpenDP's Laplace at ``scale``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def laplace(self, value: float, scale: float) -> np.ndarray:
        meas = dp.m.make_laplace(
            dp.vector_domain(dp.atom_domain(T=float, nan=False), size=self.n),
            dp.l1_distance(T=float),
            float(scale),
            k=LAPLACE_K,
        )
        return np.asarray(meas([float(value)] * self.n), dtype=np.float64)

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        raise AssertionError("the audited linear mechanisms make no private choice")


@dataclass
class ScaledNoise:
    """A deliberately broken noise source: every Laplace scale times ``factor``."""

    inner: Any
    factor: float

    def laplace(self, value: float, scale: float) -> Any:
        return self.inner.laplace(value, scale * self.factor)

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        return int(self.inner.noisy_max(scores, epsilon, sensitivity=sensitivity))


class RecordingNoise:
    """Adds no noise; remembers the noiseless value and the scale of the last release."""

    value: float = math.nan
    scale: float = math.nan

    def laplace(self, value: float, scale: float) -> float:
        self.value, self.scale = float(value), float(scale)
        return float(value)

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        raise AssertionError("not used")


@dataclass(frozen=True)
class Target:
    """One released statistic under audit."""

    name: str
    statistic: str
    mechanism: str
    options: dict[str, Any] = field(default_factory=dict)

    def release(self, grid: GridData, noise: Any) -> core.Release:
        fn = core.release_mean if self.statistic == "mean" else core.release_variance
        return fn(grid, U, EPS, self.mechanism, noise=noise, **self.options)


TARGETS = (
    Target("baseline mean", "mean", "baseline"),
    Target("clip mean", "mean", "clip"),
    Target("baseline variance", "variance", "baseline"),
    Target("clip variance", "variance", "clip", {"m": 3}),
    Target("worst_case_optimal", "mean", "worst_case_optimal"),
    Target("capped_weights mean", "mean", "capped_weights", {"k": 2}),
)
BY_NAME = {t.name: t for t in TARGETS}


def neighbours() -> tuple[GridData, GridData]:
    """Same occupancy; the heavy user's values are all 0 in the first, all U in the second
    (everyone else's are 0): the pair that moves each audited statistic by its sensitivity."""
    grids = []
    for heavy in (0.0, U):
        users = [[heavy if i == HEAVY else 0.0] * c for i, c in enumerate(COUNTS)]
        grids.append(GridData.from_user_values(users))
    return grids[0], grids[1]


def noiseless(target: Target) -> tuple[float, float, float, core.Release]:
    """``(value on D0, value on D1, noise scale, release on D0)`` without noise."""
    d0, d1 = neighbours()
    r0, r1 = RecordingNoise(), RecordingNoise()
    rel = target.release(d0, r0)
    target.release(d1, r1)
    assert r0.scale == r1.scale, "the scale must depend on public counts only"
    return r0.value, r1.value, r0.scale, rel


def mean_count_sensitivity(target: Target, kept: np.ndarray) -> float | None:
    """The sensitivity with ``m*`` (or ``Γ*``) replaced by the mean count (docs/math.md §2 formulas
    with that one substitution): the "broken sensitivity" variant. ``None`` where ``m*``
    does not enter the sensitivity (worst_case_optimal's is ``T/n``)."""
    if target.mechanism == "worst_case_optimal":
        return None
    g = kept[kept > 0].astype(np.float64)
    n, c = float(g.sum()), float(g.mean())
    if target.statistic == "mean":
        return U * c / n
    if n > 2 * c:
        return U * U * c * (n - c) / (n * n)
    return U * U / 4.0


def sample(job: tuple[str, int, int, float]) -> np.ndarray:
    """``(target name, side 0/1, n, scale factor)`` -> ``n`` releases through the engine."""
    name, side, n, factor = job
    target = BY_NAME[name]
    grid = neighbours()[side]
    noise: Any = BulkOpenDPNoise(n)
    if factor != 1.0:
        noise = ScaledNoise(noise, factor)
    release = target.release(grid, noise)
    out = np.asarray(release.estimate)
    assert out.shape == (n,), out.shape
    return out


@dataclass(frozen=True)
class AuditResult:
    bound: float  # a lower confidence bound (level 1 - alpha) on the privacy loss
    event: str  # the event that gave it
    n_events: int


def fixed_edges(v0: float, v1: float, scale: float, n_bins: int = 40) -> np.ndarray:
    """Equal-width bins over ``[min - 4b, max + 4b]``, fixed before any sampling."""
    lo, hi = min(v0, v1) - 4.0 * scale, max(v0, v1) + 4.0 * scale
    return np.linspace(lo, hi, n_bins + 1)


def loss_lower_bound(
    x0: np.ndarray, x1: np.ndarray, edges: np.ndarray, alpha: float
) -> AuditResult:
    """A ``1 - alpha`` lower confidence bound on ``max_E |ln P0(E) / P1(E)|``.

    Events ``E``: every bin between consecutive ``edges`` (plus the two unbounded end
    bins) and every half-line ``x >= edge`` and ``x < edge``. For each event and each
    direction, the bound is ``ln(CP_lower(numerator) / CP_upper(denominator))`` with
    one-sided Clopper–Pearson limits at level ``alpha / (4 · #events)`` (Bonferroni
    over every limit computed), so with probability >= 1 - alpha every one of them
    holds and the reported maximum is below the true loss.
    """
    k = len(edges)
    h0 = np.bincount(np.searchsorted(edges, x0, side="right"), minlength=k + 1)
    h1 = np.bincount(np.searchsorted(edges, x1, side="right"), minlength=k + 1)
    c0, c1 = np.cumsum(h0), np.cumsum(h1)
    # bins 0..k; "x < edges[j]" = bins 0..j; "x >= edges[j]" = bins j+1..k
    e0 = np.concatenate([h0, c0[:k], len(x0) - c0[:k]])
    e1 = np.concatenate([h1, c1[:k], len(x1) - c1[:k]])
    names = (
        [f"bin {i} of {k + 1}" for i in range(k + 1)]
        + [f"x < {edges[j]:.4g}" for j in range(k)]
        + [f"x >= {edges[j]:.4g}" for j in range(k)]
    )
    a = alpha / (4 * len(e0))

    def lower(c: np.ndarray, n: int) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.where(c > 0, stats.beta.ppf(a, c, n - c + 1), 0.0)

    def upper(c: np.ndarray, n: int) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.where(c < n, stats.beta.ppf(1 - a, c + 1, n - c), 1.0)

    lo0, up0 = lower(e0, len(x0)), upper(e0, len(x0))
    lo1, up1 = lower(e1, len(x1)), upper(e1, len(x1))
    with np.errstate(divide="ignore"):
        both = np.concatenate([np.log(lo0 / up1), np.log(lo1 / up0)])
    best = int(np.argmax(both))
    direction = "P0/P1" if best < len(e0) else "P1/P0"
    return AuditResult(float(both[best]), f"{names[best % len(e0)]} ({direction})", len(e0))


# ----------------------------------------------------------- centred_clip (adaptive)
# centred_clip draws a private centre and width before its Laplace step, so it is
# audited on its own occupancy and eps, chosen so that its public gate is met
# (0.4 eps L = 80 >= 34.2): the adaptive path, not its worst_case_optimal fallback. A
# large eps concentrates the two exponential-mechanism draws, so that the audited
# (centre, width) cell is hit often.
ADAPTIVE_EPS = 5.0
ADAPTIVE_COUNTS = (20, *(1 + (i % 5) for i in range(39)))  # L = 40, m* = 20
ADAPTIVE_MECHANISM = "centred_clip"
SENTINEL = 1e300  # releases outside the audited (centre, width) cell


def _other_value(i: int) -> float:
    """Users 1..13 sit next to U/2 (a centre candidate, so the centre draw concentrates there);
    the others alternate around it at distances U/10..U/5 (spread-out residuals)."""
    if i <= 13:  # within U/1024 of the candidate U/2, on both sides (exact floats aside)
        return U / 2.0 + (U / 1024.0 if i % 2 else -U / 1024.0)
    d = U * (0.1 + 0.1 * ((7 * i) % 13) / 12.0)
    return U / 2.0 + (d if i % 2 else -d)


def adaptive_neighbours() -> tuple[GridData, GridData]:
    """Others hold fixed values (each user constant); the heavy user's values are all 0 in
    the first grid and all U in the second (its residual around U/2 is the same in both)."""
    grids = []
    for heavy in (0.0, U):
        users = [
            [heavy if i == HEAVY else _other_value(i)] * c for i, c in enumerate(ADAPTIVE_COUNTS)
        ]
        grids.append(GridData.from_user_values(users))
    return grids[0], grids[1]


class FixedChoices(RecordingNoise):
    """No Laplace noise; the private choices return the given indices."""

    def __init__(self, picks: tuple[int, int]) -> None:
        self.picks = list(picks)

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        return self.picks.pop(0)


def adaptive_cell() -> tuple[int, int]:
    """The (centre, width) candidate pair most likely on the first grid: the top scores
    (report-noisy-max favours them; fixed before any sampling)."""
    from app.core.mechanisms import mean_centred as mc

    d0, _ = adaptive_neighbours()
    m = np.asarray(ADAPTIVE_COUNTS, dtype=np.float64)
    sums = d0.head_sums(d0.counts)
    cands = mc.centre_candidates(U)
    i = int(np.argmax(mc.centre_utility(sums / m, cands)))
    c = float(cands[i])
    R = mc.half_widths(U, int(m.max()), 0.5)
    eps_noise = mc.split_shares(ADAPTIVE_EPS, (0.4, 0.2))[2]
    pen = mc.width_penalties(R, m.size, int(m.sum()), eps_noise, U)
    sums = np.clip(sums, 0.0, U * m)
    j = int(np.argmax(-mc.clipped_counts(sums, m, U, c, R) - pen))
    return i, j


def adaptive_noiseless() -> tuple[float, float, float, core.Release]:
    """``(value on D0, value on D1, noise scale, release on D0)`` in the audited cell."""
    cell = adaptive_cell()
    out = []
    for grid in adaptive_neighbours():
        src = FixedChoices(cell)
        rel = core.release_mean(grid, U, ADAPTIVE_EPS, ADAPTIVE_MECHANISM, noise=src)
        out.append((src.value, src.scale, rel))
    (v0, s0, rel0), (v1, s1, _) = out
    assert s0 == s1
    return v0, v1, s0, rel0


def sample_adaptive(job: tuple[int, int, float]) -> np.ndarray:
    """``(side, n, scale factor)`` -> ``n`` full releases with the production noise source,
    each encoded as its estimate when its (centre, width) is the audited cell and as
    ``SENTINEL`` otherwise (an event of the whole output, so a valid audit event)."""
    from app.core.mechanisms import mean_centred as mc
    from app.core.noise.laplace import OpenDPNoise

    side, n, factor = job
    grid = adaptive_neighbours()[side]
    i, j = adaptive_cell()
    c0 = float(mc.centre_candidates(U)[i])
    R0 = float(mc.half_widths(U, max(ADAPTIVE_COUNTS), 0.5)[j])
    noise: Any = OpenDPNoise() if factor == 1.0 else ScaledNoise(OpenDPNoise(), factor)
    out = np.empty(n)
    for k in range(n):
        rel = core.release_mean(grid, U, ADAPTIVE_EPS, ADAPTIVE_MECHANISM, noise=noise)
        hit = rel.details["centre"] == c0 and rel.details["half_width"] == R0
        out[k] = rel.estimate if hit else SENTINEL
    return out
