"""Constraints the OpenAPI document declares beyond what the signatures say.

``epsilon`` query parameters are checked by ``app.answers.epsilon`` (so a bad one is a
400 reported in the documented order) rather than by FastAPI; the document still
declares their range: a number with ``exclusiveMinimum: 0``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI


def declare_epsilon_range(schema: dict[str, Any]) -> dict[str, Any]:
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                if param.get("name") == "epsilon" and param.get("in") == "query":
                    param.setdefault("schema", {})["exclusiveMinimum"] = 0
    return schema


def drop_default_validation_error(schema: dict[str, Any]) -> dict[str, Any]:
    """Remove the 422 ``HTTPValidationError`` FastAPI adds to every operation with
    parameters: dpgate answers validation errors with 400 ``invalid_request`` (declared
    by ``app.kit.errors.responses``); 422 is only ``idempotency_conflict``."""
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
        return schema if cached else drop_default_validation_error(declare_epsilon_range(schema))

    app.openapi = openapi  # type: ignore[method-assign]
