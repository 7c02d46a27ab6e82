"""``user_mean``: the mean over a grid's privacy units of each unit's own mean (docs/math.md §13).

The estimand is ``ν = (1/L) Σ_l ȳ_l`` over the grid's ``L`` units (users with records
in the grid; a (user, window) pair on a dataset with a budget window), every unit
counting once however many records it has: the per-unit AVG of BigQuery's and OpenDP's
per-identifier means. With public counts ``m_l`` and kept counts ``e_l = min(m_l, cap_l)``
(a plan or an exhausted budget may leave a unit's records out), unit ``l`` contributes

    ``t_l = S_l/(m_l L) + (m_l - e_l)(U/2)/(m_l L)``

(``S_l`` the sum of its earliest ``e_l`` records; the records left out imputed at
``U/2``). Its value-dependent part lies in ``[0, U e_l/(m_l L)]``, so the sensitivity is
``Δ = (U/L) max_l e_l/m_l <= U/L`` (``U/L`` when nothing is left out), and the estimate
misses ``ν`` by at most ``B = (U/(2L)) Σ_l (m_l - e_l)/m_l`` (``U s/(2L)`` when ``s`` units
are left out whole). ``ν̂ = Σ_l t_l + Lap(b)`` with ``b`` calibrated on the float allowance
of ``Δ`` (§9.5) is ε-DP with no private step; ``ν̂ ± (b ln 20 + B + A)`` is an honest
95% interval, ``A`` the rounding allowance of the float estimate.

Everything here is in arrays over many grids (their units one grid after another,
``pairs`` the offsets): a single query is a batch of one, a slot release all its grids
at once (:mod:`app.core.engine.user_mean_batch`), with the same floating-point operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.data.results import LN20
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import UNIT_ROUNDOFF, float_sum_sensitivities, grid_fsums
from app.core.mechanisms.interval import isolated_head_sums
from app.core.noise.laplace import NoiseSource
from app.core.noise.many import calibrate_scales

__all__ = [
    "NAME",
    "UserMeanPublic",
    "plan_user_mean",
    "rounding_allowance",
    "user_mean_public",
    "user_mean_values",
]

NAME = "baseline"
_INF = np.inf


def _up(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.nextafter(x, _INF)
    return out


def rounding_allowance(U: float, most_kept: np.ndarray) -> np.ndarray:
    """``A = (2e* + 8)·u·U`` per grid, rounded up: how far the float estimate can lie from
    the real ``Σ_l t_l`` (``e*`` the most records kept of one unit; docs/math.md §13.3)."""
    e = np.asarray(most_kept, dtype=np.float64)
    return _up(_up((2.0 * e + 8.0) * UNIT_ROUNDOFF) * float(U))


@dataclass(frozen=True, eq=False)
class UserMeanPublic:
    """Per grid, what the counts alone decide: units ``L``, units read ``K``, the float
    sensitivity, the Laplace scale, the bias bound (rounding allowance included) and the
    width of the ci95 before it is projected onto ``[0, U]`` (capped at ``U``)."""

    units: np.ndarray
    kept: np.ndarray
    most_kept: np.ndarray
    sensitivity: np.ndarray
    scale: np.ndarray
    bias: np.ndarray
    width: np.ndarray


def _unit_grid(pairs: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(pairs.size - 1, dtype=np.int64), np.diff(pairs))


def _check(counts: np.ndarray, eff: np.ndarray, pairs: np.ndarray) -> None:
    if counts.shape != eff.shape or pairs[-1] != counts.size or np.any(np.diff(pairs) < 0):
        raise ValueError("counts, kept counts and grid offsets do not match")
    if np.any(eff < 0) or np.any(eff > counts):
        raise ValueError("kept counts must lie between 0 and the counts")


def user_mean_public(
    counts: np.ndarray, eff: np.ndarray, pairs: np.ndarray, U: float, eps: float
) -> UserMeanPublic:
    """The public figures of every grid (module docstring; docs/math.md §13.2–§13.5).
    Raises ``ValueError`` naming the first grid with no unit, or none read."""
    counts = np.asarray(counts, dtype=np.int64)
    eff = np.asarray(eff, dtype=np.int64)
    pairs = np.asarray(pairs, dtype=np.int64)
    _check(counts, eff, pairs)
    G = pairs.size - 1
    at = _unit_grid(pairs)
    units = np.bincount(at[counts > 0], minlength=G)
    kept = np.bincount(at[eff > 0], minlength=G)
    for g in np.flatnonzero((units == 0) | (kept == 0)).tolist()[:1]:
        what = "a record" if units[g] == 0 else "a record left after the caps"
        raise ValueError(f"grid {g} of the batch has no unit with {what}")
    m = np.maximum(counts, 1).astype(np.float64)
    e = eff.astype(np.float64)
    Lf = units.astype(np.float64)
    # Δ = (U/L)·max e/m, every step rounded up (exactly U/L's float neighbour when whole)
    ratio = np.where(eff == counts, (counts > 0).astype(np.float64), _up(e / m))
    most = np.zeros(G)
    np.maximum.at(most, at, ratio)
    real_sens = _up(_up(float(U) * most) / Lf)
    most_kept = np.zeros(G, dtype=np.int64)
    np.maximum.at(most_kept, at, eff)
    sens = np.empty(G)
    for r in np.unique(most_kept).tolist():  # a unit's term: e roundings of its sum, 2 more
        idx = np.flatnonzero(most_kept == r)
        sens[idx] = float_sum_sensitivities(real_sens[idx], np.full(idx.size, U), int(r) + 1)
    scale = calibrate_scales(sens, eps)
    left_out = np.where(eff < counts, _up((counts - eff) / m), 0.0)
    sums = grid_fsums(left_out, pairs) if left_out.any() else np.zeros(G)
    share = np.where(sums > 0, _up(sums), 0.0)
    bias = np.where(share > 0, _up(_up(float(U) / 2.0 * share) / Lf), 0.0)
    bias = _up(bias + rounding_allowance(U, most_kept))
    width = np.minimum(float(U), 2.0 * (scale * LN20 + bias))
    return UserMeanPublic(units, kept, most_kept, sens, scale, bias, width)


def user_mean_values(
    counts: np.ndarray, eff: np.ndarray, sums: np.ndarray, pairs: np.ndarray, U: float
) -> np.ndarray:
    """The noiseless estimate of every grid: the exact sum (``math.fsum``) of each unit's
    term ``S_l/m_l/L`` and its public imputed part ``((m_l - e_l)·U/2)/m_l/L``, ``S_l``
    (``sums``) the sum of its earliest ``e_l`` records computed from its own values alone."""
    counts = np.asarray(counts, dtype=np.int64)
    eff = np.asarray(eff, dtype=np.int64)
    pairs = np.asarray(pairs, dtype=np.int64)
    _check(counts, eff, pairs)
    at = _unit_grid(pairs)
    units = np.bincount(at[counts > 0], minlength=pairs.size - 1).astype(np.float64)
    L = units[at]
    m = np.maximum(counts, 1).astype(np.float64)
    read = np.where(eff > 0, np.asarray(sums, dtype=np.float64) / m / L, 0.0)
    imputed = ((counts - eff).astype(np.float64) * (float(U) / 2.0)) / m / L
    terms = np.stack([read, imputed], axis=1).reshape(-1)  # unit by unit, two terms each
    return grid_fsums(terms, 2 * pairs)


def plan_user_mean(info: CountsInfo, U: float, eps: float) -> Draft:
    """``user_mean``'s :class:`Draft` on one grid: a batch of one of the functions above."""
    pairs = np.array([0, info.counts.size], dtype=np.int64)
    pub = user_mean_public(info.counts, info.eff, pairs, U, eps)
    sens, bias = float(pub.sensitivity[0]), float(pub.bias[0])
    details: dict[str, object] = {
        "units": int(pub.units[0]),
        "units_read": int(pub.kept[0]),
        "units_left_out": int(pub.units[0] - pub.kept[0]),
    }
    eff = info.eff

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        sums = isolated_head_sums(grid, eff)
        return Estimate(float(user_mean_values(grid.counts, eff, sums, pairs, U)[0]), sens)

    return Draft("user_mean", NAME, eps, eps, sens, bias, eff.copy(), details, estimator)
