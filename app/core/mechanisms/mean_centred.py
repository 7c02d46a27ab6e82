"""``centred_clip``: user sums clipped around a private centre with a private width.

A data-adaptive, pure ``ε``-DP (user level, replace-one-user's-values neighbours,
docs/math.md §1.2) mean of one grid. It is 003 Thm III.1's per-user projection re-centred:
worst_case_optimal clips user ``l``'s sum ``S_l`` to ``[U m_l/2 - T/2, U m_l/2 + T/2]``
around the public centre ``U/2``; here the centre ``c`` and half-width ``R`` are
chosen privately, so that on concentrated data the window is far narrower than
``U m*`` and the noise far smaller. Three steps, budgets ``ε₁ + ε₂ + ε₃ = ε``
(``ε₁ = centre_share·ε``, ``ε₂ = width_share·ε``, defaults 0.4 and 0.2):

1. **Centre** (``ε₁``): user means ``v_l = S_l/m_l`` of every user with records;
   candidates ``c_j = jU/256``, ``j = 0..256`` (public); utility
   ``u₁(c) = -max(#{l: v_l < c}, #{l: v_l > c})`` (002 Alg. 3's cost, on users);
   choose ``c_j`` by report-noisy-max on the integer scores ``u₁`` at budget ``ε₁``
   (:meth:`NoiseSource.noisy_max`, OpenDP's exact sampler; the same privacy as the
   exponential mechanism with weights ``exp(ε₁ u₁(c_j)/2)``).
2. **Width** (``ε₂``, given the released ``c``): normalised residuals
   ``r_l = |S_l - c m_l|/√m_l`` (the spread a user's sum would have if its values
   were i.i.d. around ``c``); candidates ``ρ_j = U 2^{j/4}`` from ``U 2^{-8}`` to the
   first one >= ``U √m*`` (the largest possible ``r_l``); utility
   ``u₂(ρ) = -max(#{l: r_l > ρ}, #{l: r_l < ρ/4})`` (a rank utility like 002
   Alg. 3's cost; unlike a plain private median it penalises a too *large* ρ by up
   to ``L`` instead of ``L/2``, which keeps the draw off the empty top of the
   candidate range); report-noisy-max on ``u₂`` at ``ε₂``; ``R = min(width_factor·ρ·√m*, U m*)``
   (``width_factor`` default 0.5: for i.i.d. values of spread ``σ`` the draw lands
   near ``ρ ≈ 1.2σ``, so ``R ≈ 0.6σ√m*``).
3. **Estimate** (``ε₃``): ``lo_l = max(0, c m_l - R)``, ``hi_l = min(U m_l, c m_l + R)``,
   ``θ = (1/n) Σ_l clip(S_l, lo_l, hi_l)`` + ``Lap(Δ/ε₃)`` with
   ``Δ = max_l (hi_l - lo_l)/n <= 2R/n``.

**Privacy** (written out in docs/math.md §5.8). Neighbours change one user's values,
so one ``v_l`` and one ``r_l``:
each count in ``u₁`` and ``u₂`` moves by at most 1 (so does a maximum of two such
counts), both utilities are integers with sensitivity 1 and each choice is exactly
``ε_i``-DP: OpenDP's ``make_noisy_max`` (exponential noise, i.e. permute-and-flip,
McKenna and Sheldon 2020) with the scale its own privacy map certifies for
sensitivity 1 at ``ε_i``, sampled and compared exactly (no float rounding can
give a candidate probability 0 on one dataset and positive on its neighbour).
Given
the released ``c`` and ``R`` (public from then on), user ``l``'s term lies in
``[lo_l, hi_l]`` whatever its values and no other term moves, so ``θ``'s
sensitivity is exactly ``Δ`` (every ``S_l`` in ``[0, U m_l]`` is reachable; the
brute-force test checks it) — 003 Thm III.1's argument with the interval moved.
The Laplace step is ``ε₃``-DP (OpenDP's calibrated scale, docs/math.md §9.2) and sequential
composition gives ``ε₁ + ε₂ + ε₃ = ε``. Nothing else looks at the values: the
candidates, ``m_l``, ``m*``, ``L``, ``U`` and the shares are public.

**Gate (public).** The centre draw only finds the data when its exponent beats
the number of candidates: the adaptive path runs iff ``ε₁ L >= 4 (ln 257 + 3)``
(≈ 34.2; ``L`` users with records). Otherwise, and on tiny grids, the mechanism
*is* worst_case_optimal (centre ``U/2``, ``R = T_ε/2``, all of ``ε`` on the noise,
with its worst-case bias and error; 003 Thm III.1).

The default shares and ``width_factor`` were tuned on the ITMS-like grid drawn with
data seed 1 (the experiments use seed 0).

**Reporting.** ``sensitivity = Δ`` and ``noise_scale = Δ/ε₃`` (2.5·Δ/ε with the
default shares), known after the private steps, as for levy and quantile; no
data-independent bias bound on the adaptive path (docs/math.md §3.4), so
``worst_case_bias = worst_case_error = None``. Everyone with records is used and
charged (``kept = m_l``). On concentrated data (the ITMS-like grid) the clipping
is symmetric around a good centre and costs little; on skewed data the centre
(a median of user means) can sit away from the mean and clipping then biases the
estimate towards it — ``width_factor`` widens the window.
"""

from __future__ import annotations

import math

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.mechanisms.draft import Draft, Estimate
from app.core.mechanisms.float_sums import exact_sum, float_sum_sensitivity, split_shares
from app.core.mechanisms.interval import isolated_head_sums
from app.core.mechanisms.mean_projection import plan_worst_case_optimal
from app.core.noise.laplace import NoiseSource

__all__ = [
    "CENTRE_CANDIDATES",
    "adaptive_gate",
    "centre_utility",
    "centred_window",
    "plan_centred_clip",
    "width_candidates",
    "width_utility",
]

NAME = "centred_clip"
CENTRE_CANDIDATES = 256  # c_j = jU/256, j = 0..256
WIDTH_STEPS_PER_OCTAVE = 4
WIDTH_LOW_OCTAVES = 8  # smallest ρ is U 2^-8
WIDTH_SPAN = 4.0  # u₂ penalises residuals above ρ and below ρ/4
GATE_MARGIN = 3.0


def adaptive_gate(n_users: int, eps_centre: float) -> bool:
    """``ε₁ L >= 4 (ln(#centre candidates) + 3)``: public counts and ``ε`` only."""
    need = 4.0 * (math.log(CENTRE_CANDIDATES + 1) + GATE_MARGIN)
    return eps_centre * n_users >= need * (1.0 - 1e-12)


def centre_candidates(U: float) -> np.ndarray:
    """The public centres ``jU/256``, ``j = 0..256``."""
    return np.arange(CENTRE_CANDIDATES + 1, dtype=np.float64) * (U / CENTRE_CANDIDATES)


def centre_utility(user_means: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """``u₁(c) = -max(#{v_l < c}, #{v_l > c})`` at every candidate (sensitivity 1)."""
    v = np.sort(np.asarray(user_means, dtype=np.float64))
    below = np.searchsorted(v, cands, side="left")
    above = v.size - np.searchsorted(v, cands, side="right")
    return -np.maximum(below, above).astype(np.int64)


def width_candidates(U: float, m_max: int) -> np.ndarray:
    """``ρ_j = U 2^{j/4}`` from ``U 2^-8`` up to the first one >= ``U √m*``."""
    top = math.ceil(WIDTH_STEPS_PER_OCTAVE * 0.5 * math.log2(max(m_max, 1)) - 1e-9)
    j = np.arange(-WIDTH_LOW_OCTAVES * WIDTH_STEPS_PER_OCTAVE, max(top, 0) + 1)
    return U * np.exp2(j / WIDTH_STEPS_PER_OCTAVE)


def width_utility(resid: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """``u₂(ρ) = -max(#{r_l > ρ}, #{r_l < ρ/4})`` at every candidate (sensitivity 1)."""
    r = np.sort(np.asarray(resid, dtype=np.float64))
    above = r.size - np.searchsorted(r, cands, side="right")
    far_below = np.searchsorted(r, cands / WIDTH_SPAN, side="left")
    return -np.maximum(above, far_below).astype(np.int64)


def centred_window(
    counts: np.ndarray, U: float, c: float, R: float
) -> tuple[np.ndarray, np.ndarray]:
    """``lo_l = max(0, c m_l - R)``, ``hi_l = min(U m_l, c m_l + R)`` (the box ∩ window)."""
    m = np.asarray(counts, dtype=np.float64)
    return np.maximum(0.0, c * m - R), np.minimum(U * m, c * m + R)


def _shares(eps: float, centre_share: float, width_share: float) -> tuple[float, float, float]:
    if not (0.0 < centre_share < 1.0 and 0.0 < width_share < 1.0):
        raise ValueError("centre_share and width_share must lie in (0, 1)")
    if centre_share + width_share >= 1.0:
        raise ValueError(
            "centre_share + width_share must be below 1 (the rest is the Laplace step's); "
            f"got {centre_share} + {width_share}"
        )
    e1, e2, e3 = split_shares(eps, (centre_share, width_share))
    return e1, e2, e3


def plan_centred_clip(
    info: CountsInfo,
    U: float,
    eps: float,
    centre_share: float,
    width_share: float,
    width_factor: float,
) -> Draft:
    """CENTERED_CLIP (module docstring): public plan; the centre and width are drawn at release."""
    e1, e2, e3 = _shares(eps, centre_share, width_share)
    if not width_factor > 0:
        raise ValueError(f"width_factor must be > 0, got {width_factor}")
    base: dict[str, object] = {
        "centre_share": centre_share,
        "width_share": width_share,
        "width_factor": width_factor,
    }
    if not adaptive_gate(info.n_active, e1):
        wco = plan_worst_case_optimal(info, U, eps, True)
        details = {**wco.details, **base, "path": "worst_case_optimal (gate not met)"}
        return Draft(
            "mean",
            NAME,
            eps,
            wco.eps_noise,
            wco.sensitivity,
            wco.bias,
            wco.kept,
            details,
            wco.estimator,
        )
    active = info.active
    m = info.eff[active].astype(np.float64)
    n = float(info.n_eff)
    m_max = info.m_max
    c_cands = centre_candidates(U)
    r_cands = width_candidates(U, m_max)
    details = {
        **base,
        "path": "adaptive",
        "eps_centre": e1,
        "eps_width": e2,
        "eps_noise": e3,
    }

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        sums = isolated_head_sums(grid, info.eff)[active]  # user l's sum from its values only
        u1 = centre_utility(sums / m, c_cands)
        c = float(c_cands[noise.noisy_max(u1, e1)])
        u2 = width_utility(np.abs(sums - c * m) / np.sqrt(m), r_cands)
        rho = float(r_cands[noise.noisy_max(u2, e2)])
        R = min(width_factor * rho * math.sqrt(m_max), U * m_max)
        lo, hi = centred_window(m, U, c, R)
        value = exact_sum(np.clip(sums, lo, hi)) / n
        sens = float_sum_sensitivity(float((hi - lo).max()) / n, U)
        extra: dict[str, object] = {"centre": c, "rho": rho, "half_width": R}
        return Estimate(min(max(value, 0.0), U), sens, extra)

    kept = info.eff.copy()
    return Draft("mean", NAME, eps, e3, None, None, kept, details, estimator)
