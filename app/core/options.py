"""The mechanisms' names and accepted options, with validation and coercion.

The HTTP layer validates query parameters with :func:`validate_options` and
documents them from :data:`MEAN_MECHANISMS`, :data:`VARIANCE_MECHANISMS` and
:data:`JOINT_MECHANISMS`. Ranges that depend on the grid (``m_ub`` must lie in
``[m_*, m*]``) are checked again when the mechanism is planned.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from app.core.option_spec import MechanismSpec, OptionSpec, OptionValue

__all__ = [
    "JOINT_MECHANISMS",
    "MEAN_MECHANISMS",
    "VARIANCE_MECHANISMS",
    "MechanismSpec",
    "OptionSpec",
    "OptionValue",
    "mechanisms",
    "validate_options",
]

_FILL = OptionSpec(
    "user_mean_fill",
    "bool",
    True,
    "replace each record a user contributes by that user's mean (002 §IV-A, 003 §IV)",
)
_M_UB_MEDIAN = OptionSpec(
    "m_ub",
    "int",
    None,
    "array length m_UB in [m_*, m*]; default the median count (002 §III-C)",
    minimum=1,
)
_M_UB_EQ9 = OptionSpec(
    "m_ub",
    "int",
    None,
    "array length m_UB in [m_*, m*]; default 002 eq. 9",
    minimum=1,
)
_M_CLIP = OptionSpec(
    "m",
    "int",
    None,
    "keep each user's earliest m records; default the error-minimising m",
    minimum=1,
)
_GAMMA = OptionSpec(
    "gamma",
    "float",
    0.2,
    "failure probability γ of the concentration radius τ (002 eq. 7)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
_RULE = OptionSpec(
    "rule",
    "choice",
    "exact",
    "exact: smallest minimiser of eq. 19; paper: 002 Lemma VI.2's procedure literally",
    choices=("exact", "paper"),
)
_CENTRE_SHARE = OptionSpec(
    "centre_share",
    "float",
    0.4,
    "share of eps for the private centre (exponential mechanism on user means)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
_WIDTH_SHARE = OptionSpec(
    "width_share",
    "float",
    0.2,
    "share of eps for the private width (centre_share + width_share < 1)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
_WIDTH_FACTOR = OptionSpec(
    "width_factor",
    "float",
    0.5,
    "half-width R = width_factor x private residual scale rho x sqrt(m*)",
    minimum=0.0,
    maximum=1e6,
    exclusive=True,
)
_WINDOW_SHARE = OptionSpec(
    "window_share",
    "float",
    0.2,
    "share of eps for the private window [0, b] over the user means (noisy max)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
_CAP_K = OptionSpec(
    "k",
    "int",
    None,
    "weight each user up to k records; default the k with the narrowest honest ci95",
    minimum=1,
)
_OBJECTIVE = OptionSpec(
    "objective",
    "choice",
    "accuracy",
    "accuracy: the most accurate path, its ci95 honest but wide where it clips privately; "
    "interval: the bounded mechanism whose honest ci95 is the narrowest (public counts)",
    choices=("accuracy", "interval"),
)
_VAR_WINDOW_SHARE = OptionSpec(
    "window_share",
    "float",
    0.2,
    "share of eps for the private clipping bound b of the records (noisy max)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
_VAR_CENTRE_SHARE = OptionSpec(
    "centre_share",
    "float",
    0.4,
    "share of eps for the private centre (median of user means, 33 candidates)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
_MOMENT_SHARE = OptionSpec(
    "moment_share",
    "float",
    0.1,
    "share of eps for the private clip level of per-user second moments "
    "(centre_share + moment_share < 1)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
_SPLIT = OptionSpec(
    "split",
    "choice",
    "half",
    "budget split between mean and variance: eps/2 each or the optimal split (docs/math.md §4.3)",
    choices=("half", "optimal"),
)


def _spec(name: str, description: str, bounded: bool, *opts: OptionSpec) -> MechanismSpec:
    return MechanismSpec(name, description, bounded, MappingProxyType({o.name: o for o in opts}))


MEAN_MECHANISMS: Mapping[str, MechanismSpec] = MappingProxyType(
    {
        "baseline": _spec("baseline", "mean + Lap(U m*/(n eps)) (002 §III-B)", True),
        "array_avg_wrap": _spec(
            "array_avg_wrap",
            "average of full WRAPAROUND array means, sensitivity 2U/K (002 §III-C)",
            True,
            _M_UB_MEDIAN,
            _FILL,
        ),
        "array_avg_bestfit": _spec(
            "array_avg_bestfit",
            "average of BESTFIT array means, sensitivity U/K̄ (002 §III-C)",
            True,
            _M_UB_MEDIAN,
            _FILL,
        ),
        "levy": _spec(
            "levy",
            "BESTFIT array means projected on a private interval (002 §III-D, Alg. 3)",
            False,
            _GAMMA,
            _M_UB_EQ9,
            _FILL,
        ),
        "quantile_fixed": _spec(
            "quantile_fixed",
            "array means projected on private 0.1/0.9 quantiles (002 §III-E)",
            False,
            _M_UB_EQ9,
            _FILL,
        ),
        "quantile_optimized": _spec(
            "quantile_optimized",
            "array means projected on private ceil(2/eps)/K̄ quantiles (002 §III-E)",
            False,
            _M_UB_EQ9,
            _FILL,
        ),
        "opt_array": _spec(
            "opt_array",
            "BESTFIT arrays with the worst-case-optimal m_UB of 002 eq. 15",
            True,
            _FILL,
        ),
        "opt_array_convex": _spec(
            "opt_array_convex",
            "BESTFIT arrays with m_UB from the convex surrogate 002 eq. 19",
            True,
            _FILL,
            _RULE,
        ),
        "clip": _spec(
            "clip",
            "mean of each user's earliest min(m_l, m) records (004 §III-B)",
            True,
            _M_CLIP,
        ),
        "worst_case_optimal": _spec(
            "worst_case_optimal",
            "per-user projection with threshold T_eps (003 Thm III.1)",
            True,
            _FILL,
        ),
        "centered_clip": _spec(
            "centered_clip",
            "user sums clipped to a window around a private centre, private width "
            "(003 Thm III.1 re-centred; app/core/mean_centered.py)",
            False,
            _CENTRE_SHARE,
            _WIDTH_SHARE,
            _WIDTH_FACTOR,
        ),
        "user_window": _spec(
            "user_window",
            "capped-weight user means clipped to a private window [0, b] (app/core/mean_window.py)",
            False,
            _WINDOW_SHARE,
        ),
        "capped_weights": _spec(
            "capped_weights",
            "user means with weights capped at k records, k chosen for the narrowest honest "
            "interval (app/core/mean_capped.py)",
            True,
            _CAP_K,
        ),
        "auto": _spec(
            "auto",
            "chosen from public counts: centered_clip where its gate opens, else user_window; "
            "objective=interval: capped_weights",
            False,
            _OBJECTIVE,
        ),
    }
)

VARIANCE_MECHANISMS: Mapping[str, MechanismSpec] = MappingProxyType(
    {
        "baseline": _spec("baseline", "variance + Lap(ΔVar/eps) (004 Prop III.1)", True),
        "clip": _spec(
            "clip",
            "variance of each user's earliest min(m_l, m) records (004 Lemma III.3)",
            True,
            _M_CLIP,
        ),
        "window": _spec(
            "window",
            "mixture variance of capped-weight users, records clipped to a private [0, b] "
            "(app/core/variance_window.py)",
            False,
            _VAR_WINDOW_SHARE,
        ),
        "centred": _spec(
            "centred",
            "capped-weight per-user second moments about a private centre, clipped at a "
            "private level (app/core/variance_centred.py)",
            False,
            _VAR_CENTRE_SHARE,
            _MOMENT_SHARE,
        ),
        "auto": _spec(
            "auto",
            "chosen from public counts: centred where its gate opens, else window; "
            "objective=interval: clip at the m with the narrowest honest interval",
            False,
            _OBJECTIVE,
        ),
    }
)

_AUTO_SPLIT = OptionSpec(
    "split",
    "choice",
    "half",
    "budget split between mean and variance: eps/2 each (auto has no worst-case bound "
    "to optimise a split on)",
    choices=("half",),
)

JOINT_MECHANISMS: Mapping[str, MechanismSpec] = MappingProxyType(
    {
        "baseline": _spec("baseline", "004 M_b: mean and variance of all records", True, _SPLIT),
        "clip": _spec(
            "clip",
            "004 M_clip: mean and variance of the earliest min(m_l, m) records",
            True,
            _SPLIT,
            _M_CLIP,
        ),
        "auto": _spec(
            "auto",
            "mean and variance auto (chosen from public counts) at eps/2 each, on the same "
            "records and users",
            False,
            _AUTO_SPLIT,
        ),
    }
)

_TABLES: Mapping[str, Mapping[str, MechanismSpec]] = MappingProxyType(
    {
        "mean": MEAN_MECHANISMS,
        "variance": VARIANCE_MECHANISMS,
        "joint": JOINT_MECHANISMS,
    }
)


def mechanisms(statistic: str) -> Mapping[str, MechanismSpec]:
    """Every mechanism of ``statistic`` (``mean``, ``variance`` or ``joint``) by name."""
    table = _TABLES.get(statistic)
    if table is None:
        raise ValueError(f"unknown statistic {statistic!r}; use one of {', '.join(_TABLES)}")
    return table


def mechanism_spec(statistic: str, mechanism: str) -> MechanismSpec:
    """The spec of ``mechanism`` for ``statistic`` (``mean``, ``variance`` or ``joint``)."""
    table = mechanisms(statistic)
    spec = table.get(mechanism)
    if spec is None:
        raise ValueError(
            f"unknown {statistic} mechanism {mechanism!r}; use one of {', '.join(table)}"
        )
    return spec


def validate_options(
    statistic: str, mechanism: str, options: Mapping[str, OptionValue]
) -> dict[str, OptionValue]:
    """Check and coerce ``options`` for a mechanism; return every option with defaults filled.

    Raises ``ValueError`` with a clear message for an unknown statistic, mechanism or
    option, or a value of the wrong type or out of range. ``None`` means "default".
    """
    spec = mechanism_spec(statistic, mechanism)
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        accepted = ", ".join(spec.options) or "none"
        raise ValueError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {statistic} mechanism "
            f"{mechanism!r}; accepted: {accepted}"
        )
    out: dict[str, OptionValue] = {}
    for name, opt in spec.options.items():
        raw = options.get(name)
        out[name] = opt.default if raw is None else opt.coerce(raw)
    return out
