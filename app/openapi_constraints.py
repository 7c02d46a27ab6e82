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


def install_openapi_constraints(app: FastAPI) -> None:
    """Make ``app.openapi()`` add the constraints (once; FastAPI caches the document)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        cached = app.openapi_schema is not None
        schema = build()
        return schema if cached else declare_epsilon_range(schema)

    app.openapi = openapi  # type: ignore[method-assign]
