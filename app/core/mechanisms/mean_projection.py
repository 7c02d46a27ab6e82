"""Mean mechanisms that project values: levy, quantile (002 §III-D/E), worst_case_optimal (003).

levy and quantile project BESTFIT array means onto an interval chosen privately
with half the budget; their sensitivity ``(b - a)/K̄`` is known only after that
choice and they have no data-independent bias bound (docs/math.md §3.4). worst_case_optimal
projects each user's records onto an interval fixed by the public counts
(003 Thm III.1) and has exact worst-case bias and error.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.mechanisms.draft import Draft, Estimate, rank_from_epsilon
from app.core.mechanisms.float_sums import exact_sum, float_sum_sensitivity
from app.core.mechanisms.grouping import BestFit, bestfit, check_m_ub, levy_m_ub, levy_tau
from app.core.mechanisms.interval import isolated_head_sums, private_interval, private_quantile
from app.core.noise.laplace import NoiseSource

__all__ = [
    "array_means",
    "plan_levy",
    "plan_quantile",
    "plan_worst_case_optimal",
    "wco_intervals",
    "wco_threshold",
]


def array_means(grid: GridData, info: CountsInfo, bf: BestFit, fill: bool) -> np.ndarray:
    """Means ``Ā_i`` of the BESTFIT arrays (user means in place of records when ``fill``).

    Each array mean is a function of its own users' values only (per-user sums from
    :func:`~app.core.mechanisms.interval.isolated_head_sums`, summed per array), so one user
    moves one array mean and nothing else, exactly, in floating point.
    """
    used = bf.array_of >= 0
    if fill:
        contrib = np.zeros(info.eff.size)
        sums = isolated_head_sums(grid, info.eff)
        contrib[used] = sums[used] * bf.slots[used] / info.eff[used]
    else:
        contrib = isolated_head_sums(grid, bf.slots)
    sums = np.bincount(bf.array_of[used], weights=contrib[used], minlength=bf.k_bar)
    out: np.ndarray = sums / bf.fills
    return out


def _arrays(info: CountsInfo, m_ub: int | None) -> tuple[int, BestFit]:
    """``m_UB`` (eq. 9 unless given, then checked) and its BESTFIT arrays (002 §III-C)."""
    m_ub = levy_m_ub(info) if m_ub is None else check_m_ub(info, m_ub)
    return m_ub, bestfit(info, m_ub)


def _projected(
    name: str,
    info: CountsInfo,
    eps: float,
    m_ub: int,
    bf: BestFit,
    fill: bool,
    details: dict[str, object],
    interval: Callable[[np.ndarray, NoiseSource], tuple[float, float, dict[str, object]]],
) -> Draft:
    """The mean of the array means projected on ``[lo, hi]``, an interval ``interval`` draws
    privately with ``ε/2``; sensitivity ``(hi - lo)/K̄`` for the Laplace step's ``ε/2``."""

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        means = array_means(grid, info, bf, fill)
        lo, hi, more = interval(means, noise)
        extra: dict[str, object] = {"interval_lo": lo, "interval_hi": hi, **more}
        projected = float(np.clip(means, lo, hi).mean())
        return Estimate(projected, (hi - lo) / bf.k_bar, extra)

    details = {"m_ub": m_ub, "K_bar": bf.k_bar, **details, "user_mean_fill": fill}
    kept = np.where(bf.slots > 0, info.eff, 0) if fill else bf.slots.copy()
    return Draft("mean", name, eps, eps / 2.0, None, None, kept, details, estimator)


def plan_levy(
    info: CountsInfo, U: float, eps: float, gamma: float, m_ub: int | None, fill: bool
) -> Draft:
    """LEVY (002 §III-D): BESTFIT arrays with ``m_UB`` of eq. 9, private interval by Alg. 3.

    ``τ = U √(ln(2K̄/γ)/(2 m_UB))`` (eq. 7); the interval takes exactly ``ε/2``
    (report-noisy-max at ``ε/2`` = Alg. 3's ``exp(-ε c/4)``), the projected
    mean of array means gets ``Lap(2(b - a)/(K̄ ε))``, sensitivity ``(b - a)/K̄`` (eq. 6).
    """
    m_ub, bf = _arrays(info, m_ub)
    tau = levy_tau(U, bf.k_bar, m_ub, gamma)

    def interval(means: np.ndarray, noise: NoiseSource) -> tuple[float, float, dict[str, object]]:
        lo, hi, center = private_interval(means, U, tau, eps / 2.0, noise)
        return lo, hi, {"interval_center": center}

    return _projected("levy", info, eps, m_ub, bf, fill, {"tau": tau, "gamma": gamma}, interval)


def quantile_levels(variant: str, eps: float, k_bar: int) -> tuple[float, float]:
    """Quantile levels: fixed ``(0.1, 0.9)``; optimized ``(t/K̄, 1 - t/K̄)``, ``t = ceil(2/ε)``.

    The optimized level is clamped to ``(0, 1/2]`` (docs/math.md §5.4: the
    ``t``-th smallest and ``t``-th largest meet at the median once ``t >= K̄/2``).
    """
    if variant == "fixed":
        return 0.1, 0.9
    q = min(rank_from_epsilon(2.0, eps) / k_bar, 0.5)
    return q, 1.0 - q


def plan_quantile(
    info: CountsInfo, U: float, eps: float, variant: str, m_ub: int | None, fill: bool
) -> Draft:
    """QUANTILE (002 §III-E): interval from two private quantiles of the array means, ``ε/4`` each.

    The quantiles are :func:`~app.core.mechanisms.interval.private_quantile` (a discrete
    exponential mechanism on a public grid, drawn exactly) in place of Smith's.

    BESTFIT arrays with ``m_UB`` of eq. 9; estimate = mean of array means projected on
    ``[a', b']`` + ``Lap(2(b' - a')/(K̄ ε))``.
    """
    m_ub, bf = _arrays(info, m_ub)
    q_lo, q_hi = quantile_levels(variant, eps, bf.k_bar)

    def interval(means: np.ndarray, noise: NoiseSource) -> tuple[float, float, dict[str, object]]:
        a = private_quantile(means, q_lo, U, eps / 4.0, noise)
        b = private_quantile(means, q_hi, U, eps / 4.0, noise)
        return min(a, b), max(a, b), {}

    details: dict[str, object] = {"q_lo": q_lo, "q_hi": q_hi}
    return _projected(f"quantile_{variant}", info, eps, m_ub, bf, fill, details, interval)


def wco_threshold(counts: np.ndarray, U: float, eps: float, d: int = 1) -> float:
    """``T_ε`` = the ``ceil(2d/ε)``-th largest of ``{U m_l}``, 0 if beyond ``L`` (003 §III-B)."""
    rank = rank_from_epsilon(2.0 * d, eps)
    positive = np.sort(counts[counts > 0])[::-1]
    return 0.0 if rank > positive.size else float(U * positive[rank - 1])


def wco_intervals(counts: np.ndarray, U: float, T: float) -> tuple[np.ndarray, np.ndarray]:
    """Intervals ``a_l = max((U m_l - T)/(2 m_l), 0)``, ``b_l = min((U m_l + T)/(2 m_l), U)``.

    003 Thm III.1; users with no record get a harmless placeholder.
    """
    m = np.maximum(counts, 1).astype(np.float64)
    lo = np.maximum((U * m - T) / (2.0 * m), 0.0)
    hi = np.minimum((U * m + T) / (2.0 * m), U)
    return lo, hi


def plan_worst_case_optimal(info: CountsInfo, U: float, eps: float, fill: bool) -> Draft:
    """WORST-CASE-OPTIMAL bounding (003 Thm III.1, d = 1; docs/math.md §5.7).

    Records of user ``l`` are projected on ``[a_l, b_l]``; the estimate is their mean
    plus ``Lap(T/(n ε))``; worst-case error ``(Σ_l max((U m_l - T)/2, 0) + T/ε)/n``.
    With caps the bias gains ``U·(records dropped)/n`` (triangle inequality, docs/math.md §5.7).
    If ``T = 0`` every interval is ``{U/2}``: the estimate is ``U/2`` whatever the
    values, needs no noise and uses no user (kept all 0).
    """
    eff = info.eff
    n_eff = info.n_eff
    T = wco_threshold(eff, U, eps)
    lo, hi = wco_intervals(eff, U, T)
    bias = float(np.maximum((U * eff - T) / 2.0, 0.0).sum()) / n_eff
    bias += U * info.dropped / info.n
    sens = T / n_eff
    kept = eff.copy() if T > 0 else np.zeros_like(eff)
    details: dict[str, object] = {"T": T, "user_mean_fill": fill}
    # each kept user's own values, summed exactly (docs/math.md §9.5)
    float_sens = float_sum_sensitivity(sens, U, int(info.m_max) + 2) if T > 0 else 0.0

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        if T == 0:
            return Estimate(U / 2.0, 0.0)
        if fill:
            active = eff > 0
            means = isolated_head_sums(grid, eff)[active] / eff[active]
            total = exact_sum(eff[active] * np.clip(means, lo[active], hi[active]))
        else:
            users = grid.record_user
            sel = grid.record_rank < eff[users] if info.capped else slice(None)
            u = users[sel]
            total = exact_sum(np.clip(grid.values[sel], lo[u], hi[u]))
        return Estimate(total / n_eff, float_sens)

    return Draft("mean", "worst_case_optimal", eps, eps, float_sens, bias, kept, details, estimator)
