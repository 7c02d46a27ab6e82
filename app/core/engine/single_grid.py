"""Public entry points: plan and release means, variances and joint releases of one grid.

``plan_*`` look at public counts only (who is kept and charged, sensitivity,
noise scale, worst-case bias and error); ``release_*`` add the values and the
noise. ``auto`` is chosen from the counts alone (:mod:`app.core.mechanisms.auto`): the
adaptive mechanisms most accurate on real data (docs/math.md §11). ``caps`` bounds how many
of each user's earliest records may be used (0 drops the user).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy.typing as npt

from app.core.data.checks import check_bound, check_epsilon
from app.core.data.counts import CountsInfo, prepare_counts
from app.core.data.grid import GridData
from app.core.data.results import Plan, Release
from app.core.engine.batch import PendingBatch, finish_batch
from app.core.mechanisms import registry
from app.core.mechanisms.draft import Draft, PendingRelease
from app.core.mechanisms.option_spec import OptionValue
from app.core.mechanisms.registry import validate_options
from app.core.mechanisms.variance import joint_drafts
from app.core.noise.laplace import NoiseSource, calibrate_scale, default_noise

__all__ = [
    "PendingRelease",
    "finish_releases",
    "plan",
    "plan_from_draft",
    "plan_joint",
    "plan_mean",
    "plan_variance",
    "prepare",
    "release",
    "release_joint",
    "release_mean",
    "release_variance",
    "start_releases",
]

Options = dict[str, OptionValue]
Builder = Callable[[CountsInfo, float, float, Options], Draft]


def plan_from_draft(draft: Draft, extra: Mapping[str, object] | None = None) -> Plan:
    scale = None
    error = None
    if draft.sensitivity is not None:
        scale = calibrate_scale(draft.sensitivity, draft.eps_noise)
        if draft.bias is not None:
            error = draft.bias + scale
    return Plan(
        mechanism=draft.mechanism,
        epsilon=draft.epsilon,
        sensitivity=draft.sensitivity,
        noise_scale=scale,
        worst_case_bias=draft.bias,
        worst_case_error=error,
        kept=draft.kept,
        details={**draft.details, **(extra or {})},
        statistic=draft.statistic,
    )


def prepare(
    counts: npt.ArrayLike, U: float, eps: float, caps: npt.ArrayLike | None
) -> tuple[CountsInfo, float, float]:
    return prepare_counts(counts, caps), check_bound(U), check_epsilon(eps)


def _grid_info(
    grid: GridData, U: float, eps: float, caps: npt.ArrayLike | None
) -> tuple[CountsInfo, float, float]:
    U = check_bound(U)
    eps = check_epsilon(eps)
    grid.validate(U)
    return prepare_counts(grid.counts, caps), U, eps


def plan(
    statistic: str,
    counts: npt.ArrayLike,
    U: float,
    eps: float,
    mechanism: str = "auto",
    *,
    caps: npt.ArrayLike | None = None,
    **options: OptionValue,
) -> Plan:
    """Plan a release of ``statistic`` from public per-user counts only (docs/math.md §5)."""
    info, U, eps = prepare(counts, U, eps, caps)
    return plan_from_draft(registry.draft(statistic, info, U, eps, mechanism, options))


def release(
    statistic: str,
    grid: GridData,
    U: float,
    eps: float,
    mechanism: str = "auto",
    *,
    caps: npt.ArrayLike | None = None,
    noise: NoiseSource | None = None,
    **options: OptionValue,
) -> Release:
    """Release the ``eps``-DP (user level) ``statistic`` of one grid with ``mechanism``
    (docs/math.md §5): :func:`start_releases` then :func:`finish_releases`, as a slot's
    grids are."""
    (pending,) = start_releases(
        (statistic,), grid, U, eps, mechanism, caps=caps, noise=noise, **options
    )
    return finish_releases([pending], noise)[0]


#: :func:`plan` and :func:`release` of the mean (docs/math.md §5) and of the population
#: variance (004 §III, docs/math.md §5.9).
plan_mean = partial(plan, "mean")
plan_variance = partial(plan, "variance")
release_mean = partial(release, "mean")
release_variance = partial(release, "variance")


def start_releases(
    statistics: Sequence[str],
    grid: GridData,
    U: float,
    eps: float,
    mechanism: str = "auto",
    *,
    caps: npt.ArrayLike | None = None,
    noise: NoiseSource | None = None,
    **options: OptionValue,
) -> list[PendingRelease]:
    """Every release of one grid up to its Laplace step, each statistic in turn on the
    grid checked once: the estimator runs (drawing its private choices from ``noise``)
    and the noise scale is calibrated. :func:`finish_releases` adds the noise; every
    release of dpgate, a single query's included, goes through these two steps."""
    for statistic in statistics:
        if statistic not in registry.STATISTICS:
            raise ValueError(
                f"unknown statistic {statistic!r}; use 'mean', 'variance' or 'user_mean'"
            )
    info, U, eps = _grid_info(grid, U, eps, caps)
    source = default_noise() if noise is None else noise
    return [
        PendingRelease.start(registry.draft(s, info, U, eps, mechanism, options), grid, source, U)
        for s in statistics
    ]


def finish_releases(
    pending: Sequence[PendingRelease], noise: NoiseSource | None = None
) -> list[Release]:
    """Add each pending release's Laplace noise and finish it: :func:`finish_batch` of
    their rows (docs/math.md §9.4.7), each release with the law it would have drawn alone."""
    return finish_batch(PendingBatch.of(pending), noise).releases()


def _joint(
    info: CountsInfo, U: float, eps: float, mechanism: str, split: str, m: int | None
) -> tuple[Draft, Draft, dict[str, object]]:
    """The two drafts of a joint release and ``{"joint_error": E_g}`` (docs/math.md §4.2)."""
    raw: dict[str, OptionValue] = {"split": split} if m is None else {"split": split, "m": m}
    opts = validate_options("joint", mechanism, raw)
    if mechanism == "auto":
        return _joint_auto(info, U, eps)
    mean_d, var_d, _ = joint_drafts(
        info, U, eps, mechanism, str(opts["split"]), registry.int_option(opts, "m")
    )
    joint = 0.0
    for d in (mean_d, var_d):
        assert d.sensitivity is not None and d.bias is not None
        joint += d.bias + calibrate_scale(d.sensitivity, d.eps_noise)
    return mean_d, var_d, {"joint_error": joint}


def _joint_auto(info: CountsInfo, U: float, eps: float) -> tuple[Draft, Draft, dict[str, object]]:
    """``auto`` for the mean and for the variance at ``ε/2`` each (sequential composition;
    ``ε/2 + ε/2 = ε`` exactly in floating point). Both read every kept record of the
    same users. No worst-case bound: ``joint_error`` is ``None``."""
    half = eps / 2.0
    mean_d = registry.draft("mean", info, U, half, "auto", {})
    var_d = registry.draft("variance", info, U, half, "auto", {})
    shared: dict[str, object] = {"split": "half", "joint_epsilon": eps}
    mean_d.details.update(shared)
    var_d.details.update(shared)
    return mean_d, var_d, {"joint_error": None}


def plan_joint(
    counts: npt.ArrayLike,
    U: float,
    eps: float,
    mechanism: str = "clip",
    *,
    split: str = "half",
    caps: npt.ArrayLike | None = None,
    m: int | None = None,
) -> tuple[Plan, Plan]:
    """Plan the joint mean+variance release (004 ``M_b`` / ``M_clip``) from public counts."""
    info, U, eps = prepare(counts, U, eps, caps)
    mean_d, var_d, extra = _joint(info, U, eps, mechanism, split, m)
    return plan_from_draft(mean_d, extra), plan_from_draft(var_d, extra)


def release_joint(
    grid: GridData,
    U: float,
    eps: float,
    mechanism: str = "clip",
    *,
    split: str = "half",
    caps: npt.ArrayLike | None = None,
    m: int | None = None,
    noise: NoiseSource | None = None,
) -> tuple[Release, Release]:
    """Release mean and variance together at total ``eps`` (004 ``M_b`` / ``M_clip``).

    Both use the same kept records; each release's ``epsilon`` is its share and its
    ``worst_case_error`` its own part; ``details["joint_error"]`` is ``E_g`` (docs/math.md §4.2).
    """
    info, U, eps = _grid_info(grid, U, eps, caps)
    mean_d, var_d, extra = _joint(info, U, eps, mechanism, split, m)
    source = default_noise() if noise is None else noise
    pending = [PendingRelease.start(d, grid, source, U, extra) for d in (mean_d, var_d)]
    mean_r, var_r = finish_releases(pending, source)
    return mean_r, var_r
