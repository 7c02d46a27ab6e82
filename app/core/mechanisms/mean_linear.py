"""Linear mean mechanisms: baseline, array averaging, opt arrays and clip (seeds 002, 004).

Each is ``Σ_l w_l · S_l(k_l) + Lap(Δ/ε)`` where ``S_l(k)`` sums user ``l``'s earliest
``k`` records, so its worst-case bias is the exact linear bound of docs/math.md §3.3 and a
release costs O(users) with the grid's prefix sums.

With ``user_mean_fill`` (002 §IV-A, on by default as in the papers' experiments)
the records a user places in arrays are replaced by that user's mean over all its
(capped) records: still linear, with weight ``slots / m_l`` on each of them.
"""

from __future__ import annotations

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.mechanisms.bounds import mean_sensitivity
from app.core.mechanisms.draft import Draft, linear_draft
from app.core.mechanisms.grouping import (
    bestfit,
    check_m_ub,
    median_m_ub,
    opt_array_convex_m,
    opt_array_m,
    wraparound,
)

__all__ = [
    "plan_array_bestfit",
    "plan_array_wrap",
    "plan_baseline",
    "plan_clip",
    "plan_opt_array",
    "plan_opt_array_convex",
]


def _fill_weights(
    info: CountsInfo, slots: np.ndarray, per_slot: np.ndarray, fill: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Kept heads and per-record weights for ``slots`` records of weight ``per_slot`` each."""
    if not fill:
        return slots, per_slot
    eff = info.eff
    used = slots > 0
    weights = np.zeros(eff.size)
    weights[used] = slots[used] * per_slot[used] / eff[used]
    return np.where(used, eff, 0), weights


def plan_baseline(info: CountsInfo, U: float, eps: float) -> Draft:
    """BASELINE: ``μ + Lap(Δμ/ε)``, ``Δμ = U m*/n`` (002 eq. 2, 004 eq. 5).

    With caps it is the mean of the capped records, sensitivity ``U Γ*/ΣΓ`` (004 eq. 9).
    """
    weights = np.full(info.eff.size, 1.0 / info.n_eff)
    sens = mean_sensitivity(U, info.m_max, info.n_eff)
    return linear_draft(info, U, eps, "baseline", info.eff, weights, sens, {})


def plan_array_wrap(info: CountsInfo, U: float, eps: float, m_ub: int | None, fill: bool) -> Draft:
    """ARRAY-AVERAGING with WRAPAROUND (002 §III-A1, §III-C): sensitivity ``2U/K``.

    ``K = floor(Σ min(m_l, m_UB)/m_UB)`` full arrays (002 eq. 3); ``m_UB`` defaults
    to the median count (002 Lemma III.2).
    """
    m_ub = median_m_ub(info) if m_ub is None else check_m_ub(info, m_ub)
    wrap = wraparound(info, m_ub)
    per_slot = np.full(info.eff.size, 1.0 / (wrap.k * m_ub))
    kept, weights = _fill_weights(info, wrap.kept_slots, per_slot, fill)
    details: dict[str, object] = {"m_ub": m_ub, "K": wrap.k, "user_mean_fill": fill}
    return linear_draft(info, U, eps, "array_avg_wrap", kept, weights, 2.0 * U / wrap.k, details)


def plan_array_bestfit(
    info: CountsInfo,
    U: float,
    eps: float,
    m_ub: int | None,
    fill: bool,
    mechanism: str = "array_avg_bestfit",
) -> Draft:
    """ARRAY-AVERAGING with BESTFIT (002 §III-A2, §III-C, eq. 4): sensitivity ``U/K̄``.

    The estimate is the average of the ``K̄`` array means; ``m_UB`` defaults to the
    median count (002 Lemma III.2).
    """
    m_ub = median_m_ub(info) if m_ub is None else check_m_ub(info, m_ub)
    bf = bestfit(info, m_ub)
    per_slot = np.zeros(info.eff.size)
    used = bf.array_of >= 0
    per_slot[used] = 1.0 / (bf.k_bar * bf.fills[bf.array_of[used]])
    kept, weights = _fill_weights(info, bf.slots, per_slot, fill)
    details: dict[str, object] = {"m_ub": m_ub, "K_bar": bf.k_bar, "user_mean_fill": fill}
    return linear_draft(info, U, eps, mechanism, kept, weights, U / bf.k_bar, details)


def plan_opt_array(info: CountsInfo, U: float, eps: float, fill: bool) -> Draft:
    """OPT-ARRAY-AVERAGING (002 §VI): BESTFIT with ``m_UB = m^(ε)`` of 002 eq. 15.

    ``m^(ε)`` is the smallest minimiser over ``{m_l}`` (Lemma V.2) of the worst-case
    error ``U(1 - ΣΓ/n) + U m/(ε ΣΓ)``; it is non-decreasing in ``ε`` (Lemma V.3).
    The reported bias is the exact linear bound of the arrays actually built.
    """
    return plan_array_bestfit(info, U, eps, opt_array_m(info, U, eps), fill, "opt_array")


def plan_opt_array_convex(
    info: CountsInfo, U: float, eps: float, fill: bool, rule: str = "exact"
) -> Draft:
    """OPT-ARRAY-AVERAGING with ``m_UB`` from the convex surrogate 002 eq. 19 (Lemma VI.2).

    See :func:`~app.core.mechanisms.grouping.opt_array_convex_m` for ``rule``.
    """
    m_ub = opt_array_convex_m(info, rule)
    draft = plan_array_bestfit(info, U, eps, m_ub, fill, "opt_array_convex")
    draft.details["rule"] = rule
    return draft


def clip_kept(info: CountsInfo, m: int) -> np.ndarray:
    """``Γ_l = min(m_l, m, caps_l)``: each user's earliest records up to ``m``."""
    out: np.ndarray = np.minimum(info.eff, m)
    return out


def clip_candidates(info: CountsInfo) -> np.ndarray:
    """Integers ``m ∈ [m_*, m*]`` of the capped counts (004 §V-B3, docs/math.md §5.6)."""
    return np.arange(info.m_min, info.m_max + 1, dtype=np.int64)


def best_clip_m(info: CountsInfo, U: float, eps: float) -> int:
    """The smallest integer ``m`` minimising ``E_μ(m) + Δμ_clip(m)/ε`` (docs/math.md §5.6)."""
    ms = clip_candidates(info)
    s = info.clipped_total(ms).astype(np.float64)
    err = U * (1.0 - s / info.n) + U * ms / (s * eps)
    best = float(err.min())
    return int(ms[np.flatnonzero(err <= best + 1e-12 * best)[0]])


def plan_clip(info: CountsInfo, U: float, eps: float, m: int | None) -> Draft:
    """CLIP (004 §III-B, §V-B3 for one grid): mean of ``Γ_l = min(m_l, m)`` earliest records.

    Sensitivity ``U Γ*/ΣΓ`` (004 eq. 9), bias ``U(1 - ΣΓ/n)`` (004 Thm IV.1); ``m`` is
    the error-minimising integer in ``[m_*, m*]`` unless given.
    """
    chosen = best_clip_m(info, U, eps) if m is None else int(m)
    kept = clip_kept(info, chosen)
    s = int(kept.sum())
    weights = np.full(kept.size, 1.0 / s)
    sens = mean_sensitivity(U, int(kept.max()), s)
    # The linear rule of docs/math.md §3.3 gives back 004 Thm IV.1's U(1 - ΣΓ/n) here.
    return linear_draft(info, U, eps, "clip", kept, weights, sens, {"m": chosen})
