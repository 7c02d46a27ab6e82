"""Variance mechanisms and the joint mean+variance release (seed 004 §III–V).

The population variance of the kept records (each user's earliest ``Γ_l``) gets
``Lap(ΔVar_clip/ε)`` with the exact piecewise sensitivity (004 Prop III.1,
Lemma III.3); its worst-case bias is the corrected 004 Thm IV.2 (docs/math.md §3.2).
"""

from __future__ import annotations

import math

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.mechanisms.bounds import (
    mean_clip_bias,
    mean_sensitivity,
    split_epsilon,
    variance_clip_bias,
    variance_clip_biases,
    variance_sensitivities,
    variance_sensitivity,
)
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import (
    exact_sum,
    float_sum_sensitivity,
    float_variance_sensitivity,
)
from app.core.mechanisms.interval import isolated_head_moments
from app.core.mechanisms.mean_linear import clip_candidates, clip_kept
from app.core.noise.laplace import NoiseSource

__all__ = ["best_joint_m", "best_variance_m", "joint_drafts", "plan_variance_clip"]


def _smallest_min(ms: np.ndarray, err: np.ndarray) -> int:
    best = float(err.min())
    return int(ms[np.flatnonzero(err <= best + 1e-12 * best)[0]])


LN20 = math.log(20.0)


def best_variance_m(info: CountsInfo, U: float, eps: float) -> int:
    """The smallest integer ``m ∈ [m_*, m*]`` minimising ``E_Var(m) + ΔVar_clip(m)/ε``."""
    ms = clip_candidates(info)
    s = info.clipped_total(ms)
    err = variance_clip_biases(U, s, info.n) + variance_sensitivities(U, ms, s) / eps
    return _smallest_min(ms, err)


def interval_variance_m(info: CountsInfo, U: float, eps: float) -> int:
    """The smallest ``m`` minimising the public ci95 half-width ``E_Var(m) + ln 20·ΔVar(m)/ε``
    (``auto``'s ``objective=interval``, docs/math.md §5.12)."""
    ms = clip_candidates(info)
    s = info.clipped_total(ms)
    noise = variance_sensitivities(U, ms, s) / eps
    half = variance_clip_biases(U, s, info.n) + LN20 * noise
    return _smallest_min(ms, half)


def best_joint_m(info: CountsInfo, U: float, eps: float, split: str) -> int:
    """The smallest ``m`` minimising the joint error ``E_g(m)`` of 004 eq. 13 / docs/math.md §4.2.

    With ``split="optimal"`` each ``m`` gets its own best split, for which
    ``min a/ε₁ + b/ε₂ = (√a + √b)²/ε``.
    """
    ms = clip_candidates(info)
    s = info.clipped_total(ms)
    sf = s.astype(np.float64)
    bias = U * (1.0 - sf / info.n) + variance_clip_biases(U, s, info.n)
    d_mu = U * ms / sf
    d_var = variance_sensitivities(U, ms, s)
    if split == "half":
        noise = 2.0 * (d_mu + d_var) / eps
    else:
        noise = (np.sqrt(d_mu) + np.sqrt(d_var)) ** 2 / eps
    return _smallest_min(ms, bias + noise)


def head_moments(grid: GridData, kept: np.ndarray, U: float) -> tuple[float, float]:
    """``(mean, population variance)`` of every user's earliest ``kept[l]`` records, from
    per-user sums about the public centre ``U/2`` (each user's own values only) added
    exactly over users (docs/math.md §9.5)."""
    c = U / 2.0
    s1, s2 = isolated_head_moments(grid, kept, c)
    n = int(kept.sum())
    m1 = exact_sum(s1) / n
    return c + m1, max(exact_sum(s2) / n - m1 * m1, 0.0)


def _variance_draft(
    info: CountsInfo,
    U: float,
    eps: float,
    mechanism: str,
    kept: np.ndarray,
    details: dict[str, object],
) -> Draft:
    s = int(kept.sum())
    sens = variance_sensitivity(U, int(kept.max()), s)
    bias = variance_clip_bias(U, s, info.n)

    # the kept records' own values only, summed exactly (docs/math.md §9.5)
    top = int(kept.max(initial=0))
    float_sens = float_variance_sensitivity(sens, U, top) if sens > 0 else 0.0

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        return Estimate(head_moments(grid, kept, U)[1], float_sens)

    return Draft("variance", mechanism, eps, eps, float_sens, bias, kept, details, estimator)


def plan_variance_baseline(info: CountsInfo, U: float, eps: float) -> Draft:
    """BASELINE variance: ``Var + Lap(ΔVar/ε)`` (004 §III-A, Prop III.1); caps only truncate."""
    return _variance_draft(info, U, eps, "baseline", info.eff.copy(), {})


def plan_variance_clip(info: CountsInfo, U: float, eps: float, m: int | None) -> Draft:
    """CLIP variance (004 §III-B, Lemma III.3, Thm IV.2 corrected): ``Γ_l = min(m_l, m)``.

    ``m`` minimises ``E_Var(m) + ΔVar_clip(m)/ε`` over ``[m_*, m*]`` unless given.
    """
    chosen = best_variance_m(info, U, eps) if m is None else int(m)
    return _variance_draft(info, U, eps, "clip", clip_kept(info, chosen), {"m": chosen})


def joint_drafts(
    info: CountsInfo, U: float, eps: float, mechanism: str, split: str, m: int | None
) -> tuple[Draft, Draft, dict[str, object]]:
    """004 ``M_b`` (``mechanism="baseline"``) or ``M_clip`` (``"clip"``): one ``Γ`` for both.

    The mean gets ``ε₁`` and the variance ``ε₂ = ε - ε₁``: ``ε/2`` each (004 §III) or
    the optimal split of docs/math.md §4.3. Returns the two drafts and shared details.
    """
    if mechanism == "baseline":
        chosen = None
        kept = info.eff.copy()
    elif mechanism == "clip":
        chosen = best_joint_m(info, U, eps, split) if m is None else int(m)
        kept = clip_kept(info, chosen)
    else:
        raise ValueError(f"unknown joint mechanism {mechanism!r}; use 'baseline' or 'clip'")
    s = int(kept.sum())
    top = int(kept.max())
    d_mu = mean_sensitivity(U, top, s)
    d_var = variance_sensitivity(U, top, s)
    eps1, eps2 = split_epsilon(d_mu, d_var, eps, split)
    details: dict[str, object] = {"split": split, "joint_epsilon": eps}
    if chosen is not None:
        details["m"] = chosen

    # the kept records' own values only, summed exactly (docs/math.md §9.5); a variance of
    # one record is 0 whatever its value, in floats too: no allowance to add there
    f_mu = float_sum_sensitivity(d_mu, U, top + 1)
    f_var = float_variance_sensitivity(d_var, U, top) if d_var > 0 else 0.0

    def mean_estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        return Estimate(head_moments(grid, kept, U)[0], f_mu)

    def var_estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        return Estimate(head_moments(grid, kept, U)[1], f_var)

    mean_bias = mean_clip_bias(U, s, info.n)
    var_bias = variance_clip_bias(U, s, info.n)
    mean_d = Draft(
        "mean", mechanism, eps1, eps1, f_mu, mean_bias, kept, dict(details), mean_estimator
    )
    var_d = Draft(
        "variance",
        mechanism,
        eps2,
        max(eps2, math.ulp(0.0)),
        f_var,
        var_bias,
        kept,
        dict(details),
        var_estimator,
    )
    return mean_d, var_d, details
