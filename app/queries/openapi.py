"""What ``/openapi.json`` says about the query endpoints, generated from the registry.

Everything here is derived from ``app.core.mechanisms.registry`` (``MEAN_MECHANISMS``,
``VARIANCE_MECHANISMS``, ``USER_MEAN_MECHANISMS``): the ``mechanism`` enum of each
statistic, one declared query parameter per mechanism option (type, range, default,
the mechanisms that read it, its meaning), and the endpoints' descriptions — so a
mechanism or option added to the registry appears in the documentation, and is accepted
by the unknown parameter check (``app.http.query_params``), without touching this
module. The examples are real answers: a tiny fixed synthetic grid released with
dpgate's own sampler once, when this module is imported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from app import core
from app.answers.examples import EXAMPLE_GRID_ID, EXAMPLE_U, EXAMPLE_USERS
from app.core.mechanisms.option_spec import MechanismSpec, OptionSpec

__all__ = [
    "PAPERS",
    "cite",
    "example_quote",
    "mechanism_description",
    "mechanism_schema",
    "option_parameters",
]

#: The seed papers, by the short numbers the registry's descriptions use.
PAPERS: Mapping[str, str] = {
    "002": "Mean Estimation with User-Level Privacy for Spatio-Temporal IoT Datasets",
    "003": "Bounding User Contributions for User-Level Differentially Private Mean Estimation",
    "004": "On Improving the Composition Privacy Loss in Differential Privacy for Fixed "
    "Estimation Error",
}
_PAPER = re.compile(r"\b(00[0-4])\b")

#: Options every statistic endpoint reads besides the registry's (``service._parse_query``).
PLAN_PARAMETER: dict[str, Any] = {
    "name": "plan",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "maxLength": 64},
    "description": "The `release_id` of a slot release of this grid's dataset: its "
    "Clip-User plan caps each user's records, so users it suppressed are not charged "
    "again. Read by every mechanism.",
}


def cite(text: str) -> str:
    """``text`` with the registry's short paper citations spelled out for a reader:
    ``002 §III-C`` becomes the paper's title."""
    return _PAPER.sub(lambda m: f"“{PAPERS[m.group(1)]}”", text)


def _table(statistic: str) -> Mapping[str, MechanismSpec]:
    """The registry of ``mean``, ``variance``, ``user_mean`` or ``joint`` (read at call time)."""
    tables = {
        "mean": core.MEAN_MECHANISMS,
        "variance": core.VARIANCE_MECHANISMS,
        "user_mean": core.USER_MEAN_MECHANISMS,
        "joint": core.JOINT_MECHANISMS,
    }
    return tables[statistic]


def mechanism_schema(statistic: str) -> dict[str, Any]:
    """The ``mechanism`` parameter's JSON schema: an enum of the registry's names."""
    return {"enum": list(_table(statistic))}


def mechanism_description(statistic: str) -> str:
    """One markdown line per mechanism: its name, meaning, options and whether it is bounded."""
    lines = []
    for name, spec in _table(statistic).items():
        options = ", ".join(f"`{o}`" for o in spec.options) or "none"
        bound = "worst-case error bound reported" if spec.bounded else "no worst-case bound"
        lines.append(f"- `{name}`: {cite(spec.description)} (options: {options}; {bound})")
    return "\n".join(lines)


def _json(value: object) -> str:
    return json.dumps(value)


def _option_schema(opt: OptionSpec) -> dict[str, Any]:
    kind = {"int": "integer", "float": "number", "bool": "boolean"}.get(opt.type)
    schema: dict[str, Any] = {"type": kind} if kind else {"type": "string"}
    if opt.type == "choice":
        schema["enum"] = list(opt.choices)
    if opt.minimum is not None:
        schema["exclusiveMinimum" if opt.exclusive else "minimum"] = opt.minimum
    if opt.maximum is not None:
        schema["exclusiveMaximum" if opt.exclusive else "maximum"] = opt.maximum
    return schema


def _option_users(statistic: str) -> dict[str, list[tuple[str, OptionSpec]]]:
    """Each option name with the mechanisms that read it; ``auto``'s options first (after
    ``epsilon`` and ``mechanism``, they are what most callers set)."""
    users: dict[str, list[tuple[str, OptionSpec]]] = {}
    table = _table(statistic)
    auto_first = sorted(table.items(), key=lambda item: item[0] != "auto")
    for name, spec in auto_first:
        for opt in spec.options.values():
            users.setdefault(opt.name, []).append((name, opt))
    return users


def _option_parameter(
    name: str, users: list[tuple[str, OptionSpec]], mechanisms: int
) -> dict[str, Any]:
    """The query parameter of one option. Its schema declares a ``default`` only when every
    mechanism of the endpoint reads the option with that default: ``/docs``' *Try it out*
    sends every declared default, and a mechanism refuses an option it does not read, so
    a default declared for some mechanisms would break the call for the others. The
    description states each mechanism's default instead."""
    schemas = [_option_schema(opt) for _, opt in users]
    unique = [s for i, s in enumerate(schemas) if s not in schemas[:i]]
    schema: dict[str, Any] = unique[0] if len(unique) == 1 else {"anyOf": unique}
    defaults = {repr(opt.default) for _, opt in users}
    if len(users) == mechanisms and len(defaults) == 1 and users[0][1].default is not None:
        schema = {**schema, "default": users[0][1].default}
    meanings: dict[str, list[str]] = {}
    for mechanism, opt in users:
        default = "" if opt.default is None else f" (default `{_json(opt.default)}`)"
        meanings.setdefault(cite(opt.description) + default, []).append(f"`{mechanism}`")
    if len(meanings) == 1:
        text = next(iter(meanings)) + "."
    else:
        text = "; ".join(f"with {', '.join(ms)}: {meaning}" for meaning, ms in meanings.items())
    readers = [m for m, _ in users]
    unread = "" if len(users) == mechanisms else "; leave it empty with any other"
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": f"{text} Read by `mechanism` = {', '.join(readers)}{unread} "
        "(a mechanism refuses an option it does not read).",
        "x-mechanisms": readers,
    }


def option_parameters(statistic: str) -> list[dict[str, Any]]:
    """One OpenAPI query parameter per option of the statistic's mechanisms (and ``plan``
    for the single-statistic endpoints)."""
    count = len(_table(statistic))
    declared = [_option_parameter(n, u, count) for n, u in _option_users(statistic).items()]
    single = ("mean", "variance", "user_mean")
    return [*declared, PLAN_PARAMETER] if statistic in single else declared


# ---- example: a real quote of the example grid (app.answers.examples) -----------------


@cache
def example_quote() -> dict[str, Any]:
    """A real quote (target error 5 km/h) for the example grid."""
    from app.queries.service import quote_answer

    counts = [len(u) for u in EXAMPLE_USERS]
    return quote_answer(EXAMPLE_GRID_ID, "mean", 5.0, counts, EXAMPLE_U, 10.0)
