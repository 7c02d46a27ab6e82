"""The mechanism registry, the one place a mechanism is declared: its name, description,
options, whether it has an error bound, and its constructor from public counts.

The HTTP layer validates a request's options with :func:`validate_options`; the OpenAPI
(``app.queries.openapi``), ``quote`` (the bounded ones) and the docs read these tables.
:func:`draft` validates the options and runs the constructor, or, for ``auto``, the path
:func:`app.core.mechanisms.auto.auto_mechanism` picks from the counts (``objective=accuracy``) or
the narrowest honest interval (``objective=interval``, docs/math.md §5.12). Ranges that
depend on the grid (``m_ub`` must lie in ``[m_*, m*]``) are checked when it is planned.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from app.core.data.counts import CountsInfo
from app.core.mechanisms import option_spec
from app.core.mechanisms.auto import auto_mechanism
from app.core.mechanisms.draft import Draft
from app.core.mechanisms.mean_capped import plan_capped_weights
from app.core.mechanisms.mean_centred import plan_centred_clip
from app.core.mechanisms.mean_linear import (
    plan_array_bestfit,
    plan_array_wrap,
    plan_baseline,
    plan_clip,
    plan_opt_array,
    plan_opt_array_convex,
)
from app.core.mechanisms.mean_projection import plan_levy, plan_quantile, plan_worst_case_optimal
from app.core.mechanisms.mean_window import plan_user_window
from app.core.mechanisms.option_spec import Builder, MechanismSpec, OptionSpec, OptionValue
from app.core.mechanisms.user_mean import plan_user_mean
from app.core.mechanisms.variance import (
    interval_variance_m,
    plan_variance_baseline,
    plan_variance_clip,
)
from app.core.mechanisms.variance_centred import plan_variance_centred
from app.core.mechanisms.variance_window import plan_variance_window

__all__ = [
    "BOUNDED_CANDIDATES",
    "JOINT_MECHANISMS",
    "MEAN_MECHANISMS",
    "STATISTICS",
    "USER_MEAN_MECHANISMS",
    "VARIANCE_MECHANISMS",
    "canonical_mechanism",
    "draft",
    "int_option",
    "mechanism_spec",
    "mechanisms",
    "validate_options",
]

Options = dict[str, OptionValue]


def int_option(opts: Options, name: str) -> int | None:
    v = opts.get(name)
    return None if v is None else int(v)


def float_option(opts: Options, name: str) -> float:
    v = opts[name]
    assert isinstance(v, int | float)  # validate_options coerced it
    return float(v)


def _fill(opts: Options) -> bool:
    return bool(opts["user_mean_fill"])


def _table(*specs: MechanismSpec) -> Mapping[str, MechanismSpec]:
    return MappingProxyType({spec.name: spec for spec in specs})


def _spec(
    name: str, description: str, bounded: bool, *opts: OptionSpec, build: Builder | None = None
) -> MechanismSpec:
    return MechanismSpec(
        name, description, bounded, MappingProxyType({o.name: o for o in opts}), build
    )


MEAN_MECHANISMS: Mapping[str, MechanismSpec] = _table(
    _spec(
        "baseline",
        "mean + Lap(U m*/(n eps)) (002 §III-B)",
        True,
        build=lambda i, U, e, o: plan_baseline(i, U, e),
    ),
    _spec(
        "array_avg_wrap",
        "average of full WRAPAROUND array means, sensitivity 2U/K (002 §III-C)",
        True,
        option_spec.M_UB_MEDIAN,
        option_spec.FILL,
        build=lambda i, U, e, o: plan_array_wrap(i, U, e, int_option(o, "m_ub"), _fill(o)),
    ),
    _spec(
        "array_avg_bestfit",
        "average of BESTFIT array means, sensitivity U/K̄ (002 §III-C)",
        True,
        option_spec.M_UB_MEDIAN,
        option_spec.FILL,
        build=lambda i, U, e, o: plan_array_bestfit(i, U, e, int_option(o, "m_ub"), _fill(o)),
    ),
    _spec(
        "levy",
        "BESTFIT array means projected on a private interval (002 §III-D, Alg. 3)",
        False,
        option_spec.GAMMA,
        option_spec.M_UB_EQ9,
        option_spec.FILL,
        build=lambda i, U, e, o: plan_levy(
            i, U, e, float_option(o, "gamma"), int_option(o, "m_ub"), _fill(o)
        ),
    ),
    _spec(
        "quantile_fixed",
        "array means projected on private 0.1/0.9 quantiles (002 §III-E)",
        False,
        option_spec.M_UB_EQ9,
        option_spec.FILL,
        build=lambda i, U, e, o: plan_quantile(i, U, e, "fixed", int_option(o, "m_ub"), _fill(o)),
    ),
    _spec(
        "quantile_optimized",
        "array means projected on private ceil(2/eps)/K̄ quantiles (002 §III-E)",
        False,
        option_spec.M_UB_EQ9,
        option_spec.FILL,
        build=lambda i, U, e, o: plan_quantile(
            i, U, e, "optimized", int_option(o, "m_ub"), _fill(o)
        ),
    ),
    _spec(
        "opt_array",
        "BESTFIT arrays with the worst-case-optimal m_UB of 002 eq. 15",
        True,
        option_spec.FILL,
        build=lambda i, U, e, o: plan_opt_array(i, U, e, _fill(o)),
    ),
    _spec(
        "opt_array_convex",
        "BESTFIT arrays with m_UB from the convex surrogate 002 eq. 19",
        True,
        option_spec.FILL,
        option_spec.RULE,
        build=lambda i, U, e, o: plan_opt_array_convex(i, U, e, _fill(o), str(o["rule"])),
    ),
    _spec(
        "clip",
        "mean of each user's earliest min(m_l, m) records (004 §III-B)",
        True,
        option_spec.M_CLIP,
        build=lambda i, U, e, o: plan_clip(i, U, e, int_option(o, "m")),
    ),
    _spec(
        "worst_case_optimal",
        "per-user projection with threshold T_eps (003 Thm III.1)",
        True,
        option_spec.FILL,
        build=lambda i, U, e, o: plan_worst_case_optimal(i, U, e, _fill(o)),
    ),
    _spec(
        "centred_clip",
        "user sums clipped to a window around a private centre, private width "
        "(003 Thm III.1 re-centred; app/core/mechanisms/mean_centred.py; named centered_clip "
        "before, which is still accepted)",
        False,
        option_spec.CENTRE_SHARE,
        option_spec.WIDTH_SHARE,
        option_spec.WIDTH_FACTOR,
        build=lambda i, U, e, o: plan_centred_clip(
            i,
            U,
            e,
            float_option(o, "centre_share"),
            float_option(o, "width_share"),
            float_option(o, "width_factor"),
        ),
    ),
    _spec(
        "user_window",
        "capped-weight user means clipped to a private window [0, b] "
        "(app/core/mechanisms/mean_window.py)",
        False,
        option_spec.WINDOW_SHARE,
        build=lambda i, U, e, o: plan_user_window(i, U, e, float_option(o, "window_share")),
    ),
    _spec(
        "capped_weights",
        "user means with weights capped at k records, k chosen for the narrowest honest "
        "interval (app/core/mechanisms/mean_capped.py)",
        True,
        option_spec.CAP_K,
        build=lambda i, U, e, o: plan_capped_weights(i, U, e, int_option(o, "k")),
    ),
    _spec(
        "auto",
        "chosen from public counts: centred_clip where its gate opens, else user_window; "
        "objective=interval: capped_weights",
        False,
        option_spec.OBJECTIVE,
    ),
)

VARIANCE_MECHANISMS: Mapping[str, MechanismSpec] = _table(
    _spec(
        "baseline",
        "variance + Lap(ΔVar/eps) (004 Prop III.1)",
        True,
        build=lambda i, U, e, o: plan_variance_baseline(i, U, e),
    ),
    _spec(
        "clip",
        "variance of each user's earliest min(m_l, m) records (004 Lemma III.3)",
        True,
        option_spec.M_CLIP,
        build=lambda i, U, e, o: plan_variance_clip(i, U, e, int_option(o, "m")),
    ),
    _spec(
        "window",
        "mixture variance of capped-weight users, records clipped to a private [0, b] "
        "(app/core/mechanisms/variance_window.py)",
        False,
        option_spec.VAR_WINDOW_SHARE,
        build=lambda i, U, e, o: plan_variance_window(i, U, e, float_option(o, "window_share")),
    ),
    _spec(
        "centred",
        "capped-weight per-user second moments about a private centre, clipped at a "
        "private level (app/core/mechanisms/variance_centred.py)",
        False,
        option_spec.VAR_CENTRE_SHARE,
        option_spec.MOMENT_SHARE,
        build=lambda i, U, e, o: plan_variance_centred(
            i, U, e, float_option(o, "centre_share"), float_option(o, "moment_share")
        ),
    ),
    _spec(
        "auto",
        "chosen from public counts: centred where its gate opens, else window; "
        "objective=interval: clip at the m with the narrowest honest interval",
        False,
        option_spec.OBJECTIVE,
    ),
)

USER_MEAN_MECHANISMS: Mapping[str, MechanismSpec] = _table(
    _spec(
        "baseline",
        "mean over the grid's privacy units of each unit's own mean (units left out by a "
        "plan imputed at U/2) + Lap(U/(L eps)), L the units (app/core/mechanisms/user_mean.py)",
        True,
        build=lambda i, U, e, o: plan_user_mean(i, U, e),
    ),
    _spec("auto", "baseline with its honest ci95 (either objective)", True, option_spec.OBJECTIVE),
)


JOINT_MECHANISMS: Mapping[str, MechanismSpec] = _table(
    _spec("baseline", "004 M_b: mean and variance of all records", True, option_spec.SPLIT),
    _spec(
        "clip",
        "004 M_clip: mean and variance of the earliest min(m_l, m) records",
        True,
        option_spec.SPLIT,
        option_spec.M_CLIP,
    ),
    _spec(
        "auto",
        "mean and variance auto (chosen from public counts) at eps/2 each, on the same "
        "records and users",
        False,
        option_spec.AUTO_SPLIT,
    ),
)

_TABLES: Mapping[str, Mapping[str, MechanismSpec]] = MappingProxyType(
    {
        "mean": MEAN_MECHANISMS,
        "variance": VARIANCE_MECHANISMS,
        "user_mean": USER_MEAN_MECHANISMS,
        "joint": JOINT_MECHANISMS,
    }
)


#: The statistics of one grid (``joint`` is mean and variance at once).
STATISTICS = ("mean", "variance", "user_mean")
#: Mechanisms with a worst-case error: ``quote_epsilon``'s candidates.
BOUNDED_CANDIDATES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        s: tuple(n for n, spec in _TABLES[s].items() if spec.bounded and spec.build is not None)
        for s in STATISTICS
    }
)


#: Old names of renamed mechanisms: a request that names one runs the new one and is
#: answered under the new name (one spelling: centre, centred).
RENAMED: Mapping[str, str] = MappingProxyType({"centered_clip": "centred_clip"})


def canonical_mechanism(mechanism: str) -> str:
    """The mechanism's name today (its own, unless it was renamed)."""
    return RENAMED.get(mechanism, mechanism)


def mechanisms(statistic: str) -> Mapping[str, MechanismSpec]:
    """Every mechanism of ``statistic`` (one of :data:`STATISTICS`, or ``joint``) by name."""
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


def draft(
    statistic: str,
    info: CountsInfo,
    U: float,
    eps: float,
    mechanism: str,
    options: Mapping[str, OptionValue],
) -> Draft:
    """The :class:`Draft` of ``mechanism`` (or ``auto``'s choice) on these counts."""
    opts = validate_options(statistic, mechanism, options)
    if mechanism != "auto":
        return _build(statistic, mechanism, info, U, eps, opts)
    if statistic == "user_mean":  # one mechanism, always with its honest ci95 (§13)
        chosen = plan_user_mean(info, U, eps)
        chosen.details.update(selected_by="auto", objective=opts["objective"])
        return chosen
    if opts["objective"] == "interval":  # the narrowest honest interval (docs/math.md §5.12)
        if statistic == "mean":
            chosen = plan_capped_weights(info, U, eps, None)
        else:
            chosen = plan_variance_clip(info, U, eps, interval_variance_m(info, U, eps))
        chosen.details.update(selected_by="auto", objective="interval")
        return chosen
    name = auto_mechanism(statistic, info, eps)
    chosen = _build(statistic, name, info, U, eps, validate_options(statistic, name, {}))
    chosen.details["selected_by"] = "auto"
    return chosen


def _build(
    statistic: str, mechanism: str, info: CountsInfo, U: float, eps: float, opts: Options
) -> Draft:
    build = mechanism_spec(statistic, mechanism).build
    if build is None:  # the joint mechanisms: app.core.engine.single_grid's release_joint
        raise ValueError(f"{statistic} mechanism {mechanism!r} has no single-statistic draft")
    return build(info, U, eps, opts)
