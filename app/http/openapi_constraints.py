"""Constraints the OpenAPI document declares beyond the signatures: ``epsilon`` ranges (checked by
``app.answers.epsilon``), and ``x-depends-on-dataset`` for rules that depend on the dataset named.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.answers.epsilon import MIN_EPSILON

#: Rules of query parameters (by name) that depend on the dataset, checked by the server.
QUERY_RULES = {
    "epsilon": "at most the dataset's `max_epsilon_per_query`",
    "window": "only on a dataset with a budget window (`budget_window` `day`, `week` or "
    "`month`); refused (400) on a dataset without one",
    "h3_resolution": "at most the dataset's `h3_resolution`",
    "slot_minutes": "a multiple of the dataset's `timeslot_minutes` that divides 1440",
}
#: The same for the fields of request bodies, by schema and field.
BODY_RULES = {
    "ReleaseIn": {
        "epsilon": QUERY_RULES["epsilon"],
        "h3_resolution": QUERY_RULES["h3_resolution"],
        "slot_minutes": QUERY_RULES["slot_minutes"],
        "coarsest_resolution": "at most the release's `h3_resolution`",
    },
}


def _declare(target: dict[str, Any], rule: str) -> None:
    target["x-depends-on-dataset"] = rule
    text = target.get("description", "").rstrip()
    if rule not in text:
        target["description"] = f"{text} Depends on the dataset: {rule}.".lstrip()


def declare_dataset_rules(schema: dict[str, Any]) -> dict[str, Any]:
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                name = param.get("name")
                if param.get("in") != "query" or name not in QUERY_RULES:
                    continue
                if name == "epsilon":
                    bounds = param.setdefault("schema", {})
                    bounds.pop("exclusiveMinimum", None)
                    bounds["minimum"] = float(MIN_EPSILON)
                _declare(param, QUERY_RULES[name])
    components = schema.get("components", {}).get("schemas", {})
    for model, rules in BODY_RULES.items():
        properties = components.get(model, {}).get("properties", {})
        for field, rule in rules.items():
            if field in properties:
                _declare(properties[field], rule)
    return schema


def drop_default_validation_error(schema: dict[str, Any]) -> dict[str, Any]:
    """Remove FastAPI's 422 ``HTTPValidationError`` (dpgate answers 400)."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            answer = operation.get("responses", {}).get("422", {})
            ref = str(answer.get("content", {}).get("application/json", {}).get("schema", {}))
            if "HTTPValidationError" in ref:
                del operation["responses"]["422"]
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return schema


def install_openapi_constraints(app: FastAPI) -> None:
    """Make ``app.openapi()`` add the constraints (once; FastAPI caches the document)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        cached = app.openapi_schema is not None
        schema = build()
        return schema if cached else drop_default_validation_error(declare_dataset_rules(schema))

    app.openapi = openapi  # type: ignore[method-assign]
