"""The internal form of a planned mechanism, shared by the mean and variance modules.

A :class:`Draft` is what a mechanism decides from public counts: whom it keeps,
its sensitivity (unless chosen privately), its worst-case bias and the budget of
its final Laplace step, plus an ``estimator`` that later turns a grid's values into
the noiseless estimate. The engine turns a draft into a :class:`~app.core.data.results.Plan`
(calibrating the noise scale with OpenDP) or a :class:`~app.core.data.results.Release`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from app.core.data.counts import CountsInfo
from app.core.data.grid import GridData
from app.core.data.results import BiasSpread
from app.core.mechanisms.bounds import grouped_linear_mean_bias
from app.core.mechanisms.float_sums import exact_sum, float_sum_sensitivity
from app.core.mechanisms.interval import isolated_head_sums
from app.core.noise.laplace import NoiseSource, calibrate_scale

__all__ = ["Draft", "Estimate", "PendingRelease", "linear_draft", "rank_from_epsilon"]


@dataclass(frozen=True)
class Estimate:
    """A noiseless estimate and the sensitivity of the estimator that produced it;
    ``spread`` where the mechanism bounds its bias given its private choices."""

    value: float
    sensitivity: float
    details: dict[str, object] = field(default_factory=dict)
    spread: BiasSpread | None = None


Estimator = Callable[[GridData, NoiseSource], Estimate]


@dataclass(frozen=True, eq=False)
class Draft:
    """A mechanism planned from public counts (see module docstring).

    ``sensitivity`` is ``None`` when the estimator's interval is chosen privately
    (levy, quantile); ``bias`` is ``None`` where no data-independent bound exists.
    ``eps_noise`` is the share of ``epsilon`` spent by the final Laplace step.
    """

    statistic: str
    mechanism: str
    epsilon: float
    eps_noise: float
    sensitivity: float | None
    bias: float | None
    kept: np.ndarray
    details: dict[str, object]
    estimator: Estimator

    def nominal_error(self) -> float | None:
        """``bias + sensitivity / eps_noise`` (docs/math.md §4.1) before OpenDP's scale nudge."""
        if self.bias is None or self.sensitivity is None:
            return None
        return self.bias + self.sensitivity / self.eps_noise


@dataclass(frozen=True, eq=False)
class PendingRelease:
    """A release whose private choices are drawn and whose Laplace noise is not yet."""

    draft: Draft
    estimate: Estimate
    scale: float
    U: float
    extra: Mapping[str, object] | None = None  # details of a joint release

    @classmethod
    def start(
        cls,
        draft: Draft,
        grid: GridData,
        source: NoiseSource,
        U: float,
        extra: Mapping[str, object] | None = None,
    ) -> PendingRelease:
        """Run ``draft``'s estimator (its private choices drawn from ``source``) and
        calibrate its Laplace scale."""
        est = draft.estimator(grid, source)
        return cls(draft, est, calibrate_scale(est.sensitivity, draft.eps_noise), U, extra)


def rank_from_epsilon(numerator: float, eps: float) -> int:
    """``ceil(numerator / eps)``, robust to the float rounding of ``eps`` (e.g. 2/(2/3) = 3)."""
    return max(1, math.ceil(numerator / eps * (1.0 - 1e-12)))


def linear_draft(
    info: CountsInfo,
    U: float,
    eps: float,
    mechanism: str,
    kept: np.ndarray,
    weights: np.ndarray,
    sensitivity: float,
    details: dict[str, object],
) -> Draft:
    """A linear mean estimator ``Σ_l w_l · (sum of user l's earliest kept[l] records)``.

    Its worst-case bias is the exact corner bound ``(U/2) Σ_j |w_j - 1/n|`` over all
    ``n`` records of the grid (docs/math.md §3.3), records outside the kept heads having weight 0.
    """
    kept = np.where(weights > 0, kept, 0).astype(np.int64)
    weights = np.where(kept > 0, weights, 0.0)
    bias = grouped_linear_mean_bias(U, info.counts, kept, weights)
    # Each term is a kept user's own sum (kept[l] roundings) times its weight (one more),
    # summed exactly: a user with nothing kept moves nothing (docs/math.md §9.5).
    float_sens = float_sum_sensitivity(sensitivity, U, int(kept.max(initial=0)) + 1)

    def estimator(grid: GridData, noise: NoiseSource) -> Estimate:
        value = exact_sum(weights * isolated_head_sums(grid, kept))
        return Estimate(value, float_sens)

    return Draft("mean", mechanism, eps, eps, float_sens, bias, kept, details, estimator)
