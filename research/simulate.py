"""Vectorised Monte-Carlo of dpgate's mean mechanisms on one fixed grid (seed 002 §IV).

002 runs each algorithm ``10^4`` times on one data set and reports
``E_MAE = mean_i |M^(i)(D) - μ(D)|`` (002 §IV-A). Doing that through
:func:`app.core.release_mean` ``10^4`` times per point is needlessly slow, so runs
are vectorised without changing any mechanism's law:

* **linear mechanisms** (``baseline``, both array averagings, ``opt_array*``,
  ``clip``, ``worst_case_optimal``; ``auto`` resolves to one of them): the estimate
  before noise is computed **once by the core** (``release_mean`` with a noise
  source that records the Laplace scale and adds nothing), then ``runs``
  independent ``Lap(b)`` draws are added with numpy;
* **levy / quantile** (002 §III-D/E): the BESTFIT array means are fixed by the data,
  so they are computed once; the private interval is then **sampled afresh for
  every run** — the same report-noisy-max choices as :mod:`app.core.mechanisms.interval`
  (``interval_costs`` and ``quantile_scores`` give the same integer scores; the
  choices are :func:`research.noise.noisy_max_many`, the seeded law of the
  service's sampler) — and each run's projected mean gets its own ``Lap`` draw of
  the scale that run's interval implies. A unit test feeds the same choices and
  Laplace draws to this code and to ``release_mean`` and checks equal outputs.
* every estimate is projected onto ``[0, U]``, as the service's releases are.

WRAPAROUND versions of levy and quantile (002 Fig. 1; not service mechanisms,
named ``levy@wrap``, ``quantile_fixed@wrap``, ``quantile_optimized@wrap``) use the
``K`` full WRAPAROUND arrays of 002 eq. 3. One user can sit in two of them, so one
user moves up to two array means: the interval's cost (or rank) sensitivity is 2
and the projected mean's is ``2(b - a)/K`` (002 §III-A: "a multiplicative factor
of 2"). To stay ``eps``-DP the choices are made with score sensitivity 2 at the
same budgets (``eps/2`` for levy, ``eps/4`` per quantile) and the noise is
``Lap(4(b - a)/(K eps))``.

**centred_clip** (:mod:`app.core.mechanisms.mean_centred`) draws a private centre and width
that change the window and the sensitivity in every run; its runs simply call
``release_mean`` ``runs`` times with the seeded source (a release costs well under a
millisecond), so the simulated law is the mechanism's own.

All randomness comes from the ``Generator`` inside the given
:class:`~research.noise.SeededNoise`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.core import plan_mean, release_mean
from app.core.data.counts import prepare_counts
from app.core.data.grid import GridData
from app.core.mechanisms.draft import rank_from_epsilon
from app.core.mechanisms.grouping import bestfit, levy_m_ub, levy_tau, wraparound
from app.core.mechanisms.interval import interval_costs, quantile_candidates, quantile_scores
from app.core.mechanisms.mean_projection import array_means
from app.core.mechanisms.option_spec import OptionValue
from app.core.noise.laplace import calibrate_scale
from research.noise import SeededNoise, noisy_max_many

__all__ = [
    "ADAPTIVE",
    "LINEAR",
    "PROJECTION",
    "WRAP_PROJECTION",
    "MaePoint",
    "bestfit_array_means",
    "deterministic_release",
    "levy_estimates",
    "projected_means",
    "quantile_estimates",
    "simulate_abs_errors",
    "wraparound_array_means",
]

LINEAR = frozenset(
    {
        "baseline", "array_avg_wrap", "array_avg_bestfit", "opt_array", "opt_array_convex",
        "clip", "worst_case_optimal", "capped_weights",
    }
)  # fmt: skip
PROJECTION = frozenset({"levy", "quantile_fixed", "quantile_optimized"})
ADAPTIVE = frozenset({"centred_clip", "user_window"})  # release_mean per run
WRAP_PROJECTION = frozenset({"levy@wrap", "quantile_fixed@wrap", "quantile_optimized@wrap"})


class _Capture:
    """A noise source that adds nothing and records the Laplace scale asked for."""

    def __init__(self) -> None:
        self.value: float | None = None
        self.scale: float | None = None

    def laplace(self, value: float, scale: float) -> float:
        self.value, self.scale = float(value), float(scale)
        return float(value)

    def noisy_max(  # pragma: no cover - linear mechanisms draw nothing else
        self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1
    ) -> int:
        raise AssertionError("a linear mechanism made a private choice")


def deterministic_release(
    grid: GridData, U: float, eps: float, mechanism: str, **options: OptionValue
) -> tuple[float, float, str, Mapping[str, object]]:
    """``(estimate before noise, Laplace scale, mechanism, details)`` of a linear mechanism.

    Runs the core's ``release_mean`` once with a noise source that adds nothing.
    """
    cap = _Capture()
    rel = release_mean(grid, U, eps, mechanism, noise=cap, **options)
    if rel.mechanism in PROJECTION or rel.mechanism in ADAPTIVE:
        raise ValueError(f"{rel.mechanism} is not a linear mechanism")
    assert cap.value is not None and cap.scale is not None
    return cap.value, cap.scale, rel.mechanism, rel.details


# ------------------------------------------------------------------ array means
def bestfit_array_means(grid: GridData, m_ub: int, fill: bool = True) -> np.ndarray:
    """Means of the ``K̄`` BESTFIT arrays (002 §III-A2), user means in place when ``fill``."""
    info = prepare_counts(grid.counts)
    return array_means(grid, info, bestfit(info, int(m_ub)), fill)


def wraparound_array_means(grid: GridData, m_ub: int, fill: bool = True) -> np.ndarray:
    """Means of the ``K`` full WRAPAROUND arrays (002 Alg. 1, eq. 3).

    Users in the order of 002 §III-A (counts non-increasing, ties by index) lay
    their earliest ``min(m_l, m_UB)`` records end to end; array ``i`` is positions
    ``[i m_UB, (i+1) m_UB)``; only the first ``K = floor(Σ min(m_l, m_UB)/m_UB)``
    arrays (the full ones) are kept. A user spans at most two arrays. With ``fill``
    each of its slots holds its mean over all its records.
    """
    info = prepare_counts(grid.counts)
    m = int(m_ub)
    wrap = wraparound(info, m)
    order = info.order
    sizes = np.minimum(info.eff[order], m)
    start = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    first = start // m
    in_first = np.minimum(sizes, (first + 1) * m - start)  # slots in array `first`
    rest = sizes - in_first  # slots in array `first + 1`
    k = wrap.k
    if fill:
        mean = grid.head_sums(info.eff)[order] / info.eff[order]
        part1, part2 = in_first * mean, rest * mean
    else:
        heads = np.zeros(info.eff.size, dtype=np.int64)
        heads[order] = in_first
        s1 = grid.head_sums(heads)[order]
        heads[order] = sizes
        part1, part2 = s1, grid.head_sums(heads)[order] - s1
    sums = np.zeros(k + 2)
    np.add.at(sums, np.minimum(first, k + 1), part1)
    np.add.at(sums, np.minimum(first + 1, k + 1), part2)
    return sums[:k] / m


# ------------------------------------------------------------ vectorised draws
def projected_means(means: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``mean(clip(means, lo_r, hi_r))`` for every pair ``(lo_r, hi_r)`` (prefix sums)."""
    s = np.sort(np.asarray(means, dtype=np.float64))
    p = np.concatenate(([0.0], np.cumsum(s)))
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    n_lo = np.searchsorted(s, lo, side="left")
    n_hi = np.searchsorted(s, hi, side="right")
    n_hi = np.maximum(n_hi, n_lo)
    total = lo * n_lo + (p[n_hi] - p[n_lo]) + hi * (s.size - n_hi)
    return total / s.size


def levy_picks(
    means: np.ndarray,
    U: float,
    tau: float,
    eps: float,
    rng: np.random.Generator,
    runs: int,
    *,
    multiplicity: int = 1,
) -> np.ndarray:
    """``runs`` choices of 002 Alg. 3's midpoint (report-noisy-max on ``-c`` at ``eps/2``)."""
    _, cost = interval_costs(means, U, tau)
    return noisy_max_many(rng, -cost, eps / 2.0, runs, sensitivity=multiplicity)


def levy_estimates(
    means: np.ndarray,
    U: float,
    tau: float,
    eps: float,
    picks: np.ndarray,
    z: np.ndarray,
    *,
    multiplicity: int = 1,
) -> np.ndarray:
    """002 Alg. 3 + projected mean + Laplace, one estimate per entry of ``picks`` and ``z``.

    ``picks``: chosen midpoint indices (:func:`levy_picks`); ``z``: standard ``Lap(1)``
    draws. ``multiplicity`` is how many array means one user can move (1 BESTFIT, 2
    WRAPAROUND). The noise is ``Lap(2 mult (b-a)/(K eps))``; estimates in ``[0, U]``.
    """
    k = means.size
    mids, _ = interval_costs(means, U, tau)
    lo = np.maximum(0.0, mids - 1.5 * tau)
    hi = np.minimum(U, mids + 1.5 * tau)
    proj = projected_means(means, lo, hi)
    scale = np.array(
        [
            calibrate_scale(multiplicity * (b - a) / k, eps / 2.0)
            for a, b in zip(lo, hi, strict=True)
        ]
    )
    return np.clip(proj[picks] + scale[picks] * z, 0.0, U)


def quantile_picks(
    means: np.ndarray,
    q: float,
    U: float,
    eps: float,
    rng: np.random.Generator,
    runs: int,
    *,
    multiplicity: int = 1,
) -> np.ndarray:
    """``runs`` private ``q``-quantile choices (indices into ``quantile_candidates(U)``)."""
    scores = quantile_scores(means, q, quantile_candidates(U))
    return noisy_max_many(rng, scores, eps, runs, sensitivity=multiplicity)


def quantile_estimates(
    means: np.ndarray,
    U: float,
    eps: float,
    picks: tuple[np.ndarray, np.ndarray],
    z: np.ndarray,
    *,
    multiplicity: int = 1,
) -> np.ndarray:
    """QUANTILE (002 §III-E): the two chosen quantiles (``picks``, :func:`quantile_picks` at
    ``eps/4`` each), projected mean, ``Lap(2 mult (b'-a')/(K eps))``; one per run, in [0, U]."""
    k = means.size
    cands = quantile_candidates(U)
    a, b = cands[picks[0]], cands[picks[1]]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    proj = projected_means(means, lo, hi)
    scale = np.array(
        [
            calibrate_scale(multiplicity * (y - x) / k, eps / 2.0)
            for x, y in zip(lo, hi, strict=True)
        ]
    )
    return np.clip(proj + scale * z, 0.0, U)


def _quantile_levels(variant: str, eps: float, k: int) -> tuple[float, float]:
    if variant == "fixed":
        return 0.1, 0.9
    q = min(rank_from_epsilon(2.0, eps) / k, 0.5)
    return q, 1.0 - q


# ------------------------------------------------------------------- the driver
def simulate_abs_errors(
    grid: GridData,
    U: float,
    eps: float,
    mechanism: str,
    runs: int,
    noise: SeededNoise,
    *,
    truth: float | None = None,
    **options: OptionValue,
) -> tuple[np.ndarray, str]:
    """``|M^(i)(D) - μ(D)|`` for ``runs`` independent runs, and the mechanism actually run.

    ``truth`` defaults to the grid's mean. ``auto`` is resolved from the public
    counts first (as the service does).
    """
    if runs < 1:
        raise ValueError("runs must be >= 1")
    rng = noise.rng
    mu = float(grid.values.mean()) if truth is None else float(truth)
    if mechanism == "auto":
        mechanism = plan_mean(grid.counts, U, eps, "auto", **options).mechanism
        options = {}
    if mechanism in LINEAR:
        value, scale, name, _ = deterministic_release(grid, U, eps, mechanism, **options)
        est = value + rng.laplace(0.0, scale, size=runs) if scale > 0 else np.full(runs, value)
        return np.abs(np.clip(est, 0.0, U) - mu), name
    if mechanism in ADAPTIVE:
        est = np.array(
            [
                release_mean(grid, U, eps, mechanism, noise=noise, **options).estimate
                for _ in range(runs)
            ]
        )
        return np.abs(est - mu), mechanism
    if mechanism in PROJECTION:
        plan = plan_mean(grid.counts, U, eps, mechanism, **options)
        d = plan.details
        means = bestfit_array_means(grid, int(d["m_ub"]), bool(d["user_mean_fill"]))
        mult = 1
    elif mechanism in WRAP_PROJECTION:
        base = mechanism.split("@")[0]
        info = prepare_counts(grid.counts)
        m_ub = int(options.get("m_ub") or levy_m_ub(info))  # type: ignore[arg-type]
        fill = bool(options.get("user_mean_fill", True))
        means = wraparound_array_means(grid, m_ub, fill)
        gamma = float(options.get("gamma") or 0.2)  # type: ignore[arg-type]
        d = {"tau": levy_tau(U, means.size, m_ub, gamma)}
        if base != "levy":
            lo_q, hi_q = _quantile_levels(base.split("_")[1], eps, means.size)
            d.update(q_lo=lo_q, q_hi=hi_q)
        mechanism = base
        mult = 2
    else:
        raise ValueError(f"unknown mechanism {mechanism!r}")
    if mechanism == "levy":
        tau = float(d["tau"])
        picks = levy_picks(means, U, tau, eps, rng, runs, multiplicity=mult)
        z = rng.laplace(0.0, 1.0, size=runs)
        est = levy_estimates(means, U, tau, eps, picks, z, multiplicity=mult)
    else:
        a, b = (
            quantile_picks(means, float(d[q]), U, eps / 4.0, rng, runs, multiplicity=mult)
            for q in ("q_lo", "q_hi")
        )
        z = rng.laplace(0.0, 1.0, size=runs)
        est = quantile_estimates(means, U, eps, (a, b), z, multiplicity=mult)
    name = mechanism if mult == 1 else f"{mechanism}@wrap"
    return np.abs(est - mu), name


@dataclass(frozen=True)
class MaePoint:
    """One point of an MAE-versus-eps curve."""

    mechanism: str
    eps: float
    mae: float
    stderr: float
    runs: int
