"""Every operation of ``/openapi.json`` answers 2xx when called the way ``/docs``' *Try it
out* calls it (API.md): a real server with data, an admin key (Authorize), valid values
for what is required, and every declared default sent as is — nothing else.

The walk is driven by the document: a new operation, parameter or body field needs no
change here unless it is required, and then the test says which value it lacks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import ADMIN_KEY
from tests.helpers import create_key
from tests.integration.grid_fixtures import CELL_A, HOUR, csv_for, load
from tests.live_server import ThreadedServer

GRID = {f"u{i}": [float(i % 9 + 1)] * (1 + i % 4) for i in range(14)}
SLOT = HOUR.strftime("%Y-%m-%dT%H:%M:%S")
METHODS = ("get", "put", "post", "patch", "delete")  # in this order: removals last
#: Valid values of required query parameters, by name.
QUERY_VALUES: dict[str, Any] = {"epsilon": 0.5, "target_error": 5.0, "slot_start": SLOT}
#: Valid values of the body fields a request needs (required by the schema, or by a
#: rule the schema cannot state: exactly one of a release's epsilon and max_user_cost).
BODY_VALUES: dict[str, dict[str, Any]] = {
    "DatasetCreate": {"name": "tried out", "value_bound": 65.0, "budget_per_user": 100.0},
    "KeyCreate": {"name": "tried out", "role": "analyst"},
    "ResetIn": {"reason": "tried out"},
    "PreviewIn": {"value_bound": 10.0, "epsilon": 1.0, "occupancy": [[1, 1, 2], [1, 2, 3]]},
    "ReleaseIn": {"slot_start": SLOT, "epsilon": 0.5},
    "PublicIn": {"public": True},
}


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    ref = schema.get("$ref", "")
    name = ref.rsplit("/", 1)[-1]
    return name, doc["components"]["schemas"][name] if ref else schema


def body_as_tried(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The required fields with valid values, every other field's declared default."""
    name, resolved = _resolve(doc, schema)
    valid = BODY_VALUES.get(name, {})
    body: dict[str, Any] = {}
    for field, prop in resolved.get("properties", {}).items():
        if field in valid:
            body[field] = valid[field]
        elif field in resolved.get("required", []):
            pytest.fail(f"no valid value of {name}.{field} in BODY_VALUES")
        elif "default" in prop:
            body[field] = prop["default"]
    return body


def query_as_tried(path: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    query: dict[str, Any] = {}
    for param in params:
        if param["in"] != "query":
            continue
        name, schema = param["name"], param.get("schema", {})
        if param.get("required"):
            assert name in QUERY_VALUES, f"no valid value of {path}'s {name} in QUERY_VALUES"
            query[name] = QUERY_VALUES[name]
        elif "default" in schema:
            default = schema["default"]
            query[name] = json.dumps(default) if isinstance(default, bool) else default
    return query


@pytest.fixture
def served(app: FastAPI, client: TestClient) -> Iterator[tuple[str, dict[str, str]]]:
    """The app over real HTTP, with a dataset, its grid, a release and a key to revoke."""
    ds = client.post(
        "/datasets", json={"name": "try it out", "value_bound": 10.0, "budget_per_user": 100.0}
    ).json()["id"]
    grid = load(client, ds, {CELL_A: GRID})[CELL_A]
    release = client.post(f"/datasets/{ds}/releases", json={"slot_start": SLOT, "epsilon": 0.5})
    assert release.status_code == 200, release.text
    spare = client.post("/keys", json={"name": "to revoke", "role": "analyst"}).json()["id"]
    create_key(client, "analyst")
    paths = {
        "dataset_id": str(ds),
        "grid_id": grid,
        "release_id": release.json()["release_id"],
        "key_id": str(spare),
    }
    with ThreadedServer(app) as server:
        yield server.url, paths


def test_every_operation_answers_2xx_as_try_it_out_calls_it(
    served: tuple[str, dict[str, str]],
) -> None:
    url, path_values = served
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=url, headers=auth, timeout=60, trust_env=False) as http:
        doc = http.get("/openapi.json").json()
        operations = [
            (method, path, item[method])
            for method in METHODS
            for path, item in doc["paths"].items()
            if method in item
        ]
        assert len(operations) >= 25, "the document lost its operations"
        answered = []
        for method, path, op in operations:
            params = op.get("parameters", [])
            target = path.format(**{p["name"]: path_values[p["name"]] for p in params
                                    if p["in"] == "path"})  # fmt: skip
            request: dict[str, Any] = {"params": query_as_tried(path, params)}
            content = op.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                schema = content["application/json"]["schema"]
                request["json"] = body_as_tried(doc, schema)
            elif "text/csv" in content:
                request["content"] = csv_for({CELL_A: {"late": [3.0, 4.0]}}).encode()
                request["headers"] = {"Content-Type": "text/csv"}
            resp = http.request(method.upper(), target, **request)
            assert 200 <= resp.status_code < 300, (method, path, request, resp.text[:500])
            answered.append((method, path))
    assert ("get", "/grids/{grid_id}/mean") in answered
    assert ("delete", "/keys/{key_id}") in answered
