"""Schemathesis against dpgate's own ``/openapi.json``, in process, on both databases.

Every operation of the schema is fuzzed (positive and negative data, random and real
path ids, an admin or an analyst key). Each response must: not be a 5xx, carry a
status code and content type the schema documents, match the documented response
schema, and — for every 4xx — have the error shape ``{"error": {"code", "message"}}``.
Bounded: a fixed Hypothesis seed and ``EXAMPLES`` examples per operation and database.
"""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient


@pytest.mark.slow
def test_schemathesis_every_operation(app: FastAPI) -> None:
    from tests.security.fuzz_harness import fuzz_every_operation  # see its docstring

    fuzz_every_operation(app)


def test_every_operation_documents_its_error_responses(client: TestClient) -> None:
    """401/403 and what any keyed request may meet (400, 408, 413, 429, 503) are in the
    schema, as the error body, for every operation that takes a key."""
    doc = client.get("/openapi.json").json()
    error_ref = "#/components/schemas/ErrorBody"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if path in ("/healthz", "/readyz", "/version", "/public/releases"):  # no key
                continue
            codes = set(op["responses"])
            assert {"400", "401", "403", "408", "413", "429", "503"} <= codes, (method, path)
            for code in codes - {"200", "201", "204", "304"}:
                schema = op["responses"][code]["content"]["application/json"]["schema"]
                assert schema == {"$ref": error_ref}, (method, path, code, schema)
