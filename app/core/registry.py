"""The mechanism registry: every mechanism's builder from public counts, and ``auto``'s rule.

One table per statistic maps a mechanism's name (its :mod:`app.core.options` spec) to
the function that plans it; :func:`draft` validates the options and runs it, or, for
``auto``, runs the path :func:`app.core.auto.auto_mechanism` picks from the counts
(``objective=accuracy``) or the narrowest honest interval (``objective=interval``,
docs/math.md §5.12).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from app.core.auto import auto_mechanism
from app.core.counts import CountsInfo
from app.core.draft import Draft
from app.core.mean_capped import plan_capped_weights
from app.core.mean_centered import plan_centered_clip
from app.core.mean_linear import (
    plan_array_bestfit,
    plan_array_wrap,
    plan_baseline,
    plan_clip,
    plan_opt_array,
    plan_opt_array_convex,
)
from app.core.mean_projection import plan_levy, plan_quantile, plan_worst_case_optimal
from app.core.mean_window import plan_user_window
from app.core.options import OptionValue, validate_options
from app.core.variance import interval_variance_m, plan_variance_baseline, plan_variance_clip
from app.core.variance_centred import plan_variance_centred
from app.core.variance_window import plan_variance_window

__all__ = ["BOUNDED_CANDIDATES", "TABLES", "draft", "int_option"]

Options = dict[str, OptionValue]
Builder = Callable[[CountsInfo, float, float, Options], Draft]


def int_option(opts: Options, name: str) -> int | None:
    v = opts.get(name)
    return None if v is None else int(v)


def _float_opt(opts: Options, name: str) -> float:
    v = opts[name]
    assert isinstance(v, int | float)  # validate_options coerced it
    return float(v)


def _fill(opts: Options) -> bool:
    return bool(opts["user_mean_fill"])


_MEAN: Mapping[str, Builder] = {
    "baseline": lambda i, U, e, o: plan_baseline(i, U, e),
    "array_avg_wrap": lambda i, U, e, o: plan_array_wrap(i, U, e, int_option(o, "m_ub"), _fill(o)),
    "array_avg_bestfit": lambda i, U, e, o: plan_array_bestfit(
        i, U, e, int_option(o, "m_ub"), _fill(o)
    ),
    "levy": lambda i, U, e, o: plan_levy(
        i, U, e, _float_opt(o, "gamma"), int_option(o, "m_ub"), _fill(o)
    ),
    "quantile_fixed": lambda i, U, e, o: plan_quantile(
        i, U, e, "fixed", int_option(o, "m_ub"), _fill(o)
    ),
    "quantile_optimized": lambda i, U, e, o: plan_quantile(
        i, U, e, "optimized", int_option(o, "m_ub"), _fill(o)
    ),
    "opt_array": lambda i, U, e, o: plan_opt_array(i, U, e, _fill(o)),
    "opt_array_convex": lambda i, U, e, o: plan_opt_array_convex(i, U, e, _fill(o), str(o["rule"])),
    "clip": lambda i, U, e, o: plan_clip(i, U, e, int_option(o, "m")),
    "worst_case_optimal": lambda i, U, e, o: plan_worst_case_optimal(i, U, e, _fill(o)),
    "centered_clip": lambda i, U, e, o: plan_centered_clip(
        i,
        U,
        e,
        _float_opt(o, "centre_share"),
        _float_opt(o, "width_share"),
        _float_opt(o, "width_factor"),
    ),
    "user_window": lambda i, U, e, o: plan_user_window(i, U, e, _float_opt(o, "window_share")),
    "capped_weights": lambda i, U, e, o: plan_capped_weights(i, U, e, int_option(o, "k")),
}

_VARIANCE: Mapping[str, Builder] = {
    "baseline": lambda i, U, e, o: plan_variance_baseline(i, U, e),
    "clip": lambda i, U, e, o: plan_variance_clip(i, U, e, int_option(o, "m")),
    "window": lambda i, U, e, o: plan_variance_window(i, U, e, _float_opt(o, "window_share")),
    "centred": lambda i, U, e, o: plan_variance_centred(
        i, U, e, _float_opt(o, "centre_share"), _float_opt(o, "moment_share")
    ),
}

# Mechanisms with a worst-case error (``quote_epsilon``'s candidates), in tie-breaking order.
BOUNDED_MEAN = (
    "baseline",
    "clip",
    "worst_case_optimal",
    "opt_array",
    "opt_array_convex",
    "array_avg_bestfit",
    "array_avg_wrap",
    "capped_weights",
)
BOUNDED_VARIANCE = ("baseline", "clip")
TABLES: Mapping[str, Mapping[str, Builder]] = {"mean": _MEAN, "variance": _VARIANCE}
BOUNDED_CANDIDATES: Mapping[str, tuple[str, ...]] = {
    "mean": BOUNDED_MEAN,
    "variance": BOUNDED_VARIANCE,
}


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
    builders = TABLES[statistic]
    if mechanism != "auto":
        return builders[mechanism](info, U, eps, opts)
    if opts["objective"] == "interval":  # the narrowest honest interval (docs/math.md §5.12)
        if statistic == "mean":
            chosen = plan_capped_weights(info, U, eps, None)
        else:
            chosen = plan_variance_clip(info, U, eps, interval_variance_m(info, U, eps))
        chosen.details.update(selected_by="auto", objective="interval")
        return chosen
    name = auto_mechanism(statistic, info, eps)
    chosen = builders[name](info, U, eps, validate_options(statistic, name, {}))
    chosen.details["selected_by"] = "auto"
    return chosen
