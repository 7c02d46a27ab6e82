"""``capped_weights``: user means with public weights capped at ``k`` records — the
narrowest honest interval among the linear means (docs/math.md §5.12).

Public, from counts: ``Γ_l = min(eff_l, k)``, weights ``w_l = Γ_l/ΣΓ`` (the per-user weights
of Cummings, Feldman, McMillan and Talwar, "Mean Estimation with User-level Privacy under
Data Heterogeneity", NeurIPS 2022), each user's mean ``v_l`` over all its kept records.
``θ = Σ_l w_l v_l + Lap(U w*/ε)``: user ``l``'s term lies in ``[0, U w_l]`` whatever its
values, so the sensitivity is ``U w*`` (``w* = max_l w_l``). It is linear with fixed
weights, so its worst-case bias is docs/math.md §3.3's exact
``(U/2)(Σ_l |w_l - eff_l/n| + d)`` (``d`` the capped records' share), at most the clip
mechanism's ``U(1 - ΣΓ/n)`` at the same ``k``: the reweighting moves mass only between users.

Its ``ci95`` is ``θ ± (b ln 20 + bias)`` before projection, a number of the counts alone,
so ``k`` (unless given) minimises that half-width: ``ln 20·U k/(ΣΓ(k)·ε) + bias(k)``
over ``k`` in ``[m_*, m*]`` (``k = m*`` is baseline). No private step; everything is
charged ``ε``.
"""

from __future__ import annotations

import math

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.mechanisms.draft import Draft, linear_draft

__all__ = ["capped_half_widths", "interval_k", "plan_capped_weights"]

NAME = "capped_weights"
LN20 = math.log(20.0)


def _weights(info: CountsInfo, k: int) -> np.ndarray:
    """``w_l = min(eff_l, k)/Σ min(eff, k)`` for every user (0 where nothing is kept)."""
    gam = np.minimum(info.eff, k).astype(np.float64)
    out: np.ndarray = gam / gam.sum()
    return out


def capped_half_widths(info: CountsInfo, U: float, eps: float, ks: np.ndarray) -> np.ndarray:
    """``ln 20·U w*(k)/ε + bias(k)`` for each ``k``: the ci95 half-width before projection.

    ``bias(k) = (U/2)(Σ_l |min(a_l, k)/S - a_l/n| + d)`` with ``S = Σ min(a, k)`` over the
    sorted kept counts ``a`` and their prefix sums: users at or below ``k`` give
    ``P(≤k)·|1/S - 1/n|``; those above give ``|k/S - a/n|``, which changes sign at
    ``a = kn/S``. O(log L) per ``k``."""
    a = np.sort(info.eff[info.active]).astype(np.float64)
    L = a.size
    P = np.concatenate(([0.0], np.cumsum(a)))
    n = float(info.n)
    k = np.asarray(ks, dtype=np.float64)
    i = np.searchsorted(a, k, side="right")
    S = P[i] + k * (L - i)
    low = P[i] * np.abs(1.0 / S - 1.0 / n)
    j = np.maximum(np.searchsorted(a, k * n / S, side="left"), i)
    ks_over = k / S
    high = (ks_over * (j - i) - (P[j] - P[i]) / n) + ((P[L] - P[j]) / n - ks_over * (L - j))
    bias = U / 2.0 * (low + high + info.dropped / n)
    w_max = np.minimum(k, info.m_max) / S
    out: np.ndarray = LN20 * U * w_max / eps + bias
    return out


def interval_k(info: CountsInfo, U: float, eps: float) -> int:
    """The smallest ``k`` in ``[m_*, m*]`` with the narrowest public ci95 half-width."""
    ks = np.arange(info.m_min, info.m_max + 1, dtype=np.int64)
    half = capped_half_widths(info, U, eps, ks)
    return int(ks[int(np.argmin(half))])


def plan_capped_weights(info: CountsInfo, U: float, eps: float, k: int | None) -> Draft:
    """CAPPED_WEIGHTS (module docstring): per-record weight ``w_l/eff_l`` on all kept records."""
    chosen = interval_k(info, U, eps) if k is None else int(k)
    if chosen < 1:
        raise ValueError(f"option 'k' must be >= 1, got {chosen}")
    w = _weights(info, chosen)
    eff = info.eff
    per_record = np.where(eff > 0, w / np.maximum(eff, 1), 0.0)
    sens = U * float(w.max())
    return linear_draft(info, U, eps, NAME, eff.copy(), per_record, sens, {"k": chosen})
