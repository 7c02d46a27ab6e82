"""Schemathesis and Hypothesis fuzzing of every operation (used by
:mod:`tests.security.test_fuzz_openapi`, which says what is checked).

A module of its own, imported by the slow test alone: the two libraries are ~230 modules that
pytest assertion-rewrites (their packages ship pytest plugins), which every xdist worker paid
at collection when the test module imported them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import hypothesis
import jsonschema_rs
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import text

from app.core import MEAN_MECHANISMS, VARIANCE_MECHANISMS
from tests.conftest import ADMIN_KEY
from tests.security.support import ADMIN, assert_error, populate

EXAMPLES = 40
SEED = 20_240_305


def error_shape(ctx: Any, response: Any, case: Any) -> None:
    """Every 4xx/5xx answer has the documented error body."""
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body, dict) and set(body) == {"error"}, body
        extra = {"largest_epsilon"} if body["error"].get("code") == "budget_exhausted" else set()
        assert set(body["error"]) == {"code", "message", *extra}, body
        assert isinstance(body["error"]["code"], str) and body["error"]["message"], body


class DocumentedSchema:
    """Validates a JSON response against the schema ``/openapi.json`` documents for its
    status, with a Draft 2020-12 validator (the dialect of OpenAPI 3.1).

    Schemathesis' own ``response_schema_conformance`` turns ``prefixItems`` (pydantic's
    tuples) into a draft-4 ``items`` array and then refuses it under 2020-12
    (schemathesis issue #3842), so for operations whose responses hold a tuple it is
    replaced by this check; elsewhere both run.
    """

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self._cache: dict[tuple[str, str, str], Any] = {}

    def validator(self, path: str, method: str, status: int) -> Any:
        responses = self.document["paths"][path][method.lower()]["responses"]
        entry = responses.get(str(status)) or responses.get("default")
        assert entry is not None, f"{method} {path}: status {status} is not documented"
        key = (path, method, str(status))
        if key not in self._cache:
            schema = entry["content"]["application/json"]["schema"]
            self._cache[key] = jsonschema_rs.Draft202012Validator(
                {**schema, "components": self.document["components"]}
            )
        return self._cache[key]

    def __call__(self, ctx: Any, response: Any, case: Any) -> None:
        op = case.operation
        if response.status_code == 204:  # no content, none documented
            assert not response.content, response.content
            return
        raw = response.headers.get("content-type") or ""
        media = (raw[0] if isinstance(raw, list) else raw).split(";")[0].strip()
        if media != "application/json":  # GeoJSON or CSV of a stored release: documented type
            responses = self.document["paths"][op.path][op.method.lower()]["responses"]
            content = responses[str(response.status_code)]["content"]
            assert media in content, f"{op.method} {op.path}: {media} is not documented"
            return
        validator = self.validator(op.path, op.method, response.status_code)
        errors = [e.message for e in validator.iter_errors(response.json())]
        assert not errors, f"response does not match the documented schema: {errors[:3]}"


def _checks(op: Any, documented: DocumentedSchema) -> list[Any]:
    def matches_documented_schema(ctx: Any, response: Any, case: Any) -> None:
        documented(ctx, response, case)

    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        negative_data_rejection,
        error_shape,
        matches_documented_schema,
    ]
    responses = documented.document["paths"][op.path][op.method.lower()]["responses"]
    if not _uses(documented.document, responses, "prefixItems"):
        checks.append(response_schema_conformance)
    return checks


def _uses(document: dict[str, Any], node: Any, keyword: str, seen: set[str] | None = None) -> bool:
    """Whether ``node`` (following ``$ref`` into the document) contains ``keyword``."""
    seen = set() if seen is None else seen
    if isinstance(node, list):
        return any(_uses(document, item, keyword, seen) for item in node)
    if not isinstance(node, dict):
        return False
    if keyword in node:
        return True
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        seen.add(ref)
        target: Any = document
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        if _uses(document, target, keyword, seen):
            return True
    return any(_uses(document, v, keyword, seen) for k, v in node.items() if k != "$ref")


def _csv_rows() -> st.SearchStrategy[str]:
    """CSV text with the default header and rows mixing plausible and hostile fields."""
    field = st.one_of(
        st.sampled_from(["u1", "u2", "2024-03-05T10:00:01Z", "1709632801", "30.2672", "-97.7431"]),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=12),
    )
    row = st.lists(field, min_size=4, max_size=6).map(",".join)
    return st.lists(row, max_size=8).map(
        lambda rows: "\n".join(["user_id,timestamp,lat,lon,value", *rows]) + "\n"
    )


def _guided(op: Any, fixed: dict[str, str], slot: str) -> list[st.SearchStrategy[Any]]:
    """Strategies that reach the success path: real ids, known mechanisms, sane bodies
    (pure random data almost never gets past validation on these operations)."""
    positive = GenerationMode.POSITIVE
    label = op.label
    if label.endswith(("/mean", "/variance")):
        mechanisms = sorted(MEAN_MECHANISMS if label.endswith("/mean") else VARIANCE_MECHANISMS)
        query = st.fixed_dictionaries(
            {
                "mechanism": st.sampled_from([*mechanisms, "auto"]),
                "epsilon": st.floats(min_value=1e-3, max_value=10.0),
            }
        )
        return [query.flatmap(lambda q: op.as_strategy(positive, path_parameters=fixed, query=q))]
    if label.endswith("/records"):
        return [
            _csv_rows().flatmap(
                lambda body: op.as_strategy(
                    positive, path_parameters=fixed, body=body, media_type="text/csv"
                )
            )
        ]
    if label == "POST /plans/preview":
        body = st.fixed_dictionaries(
            {
                "value_bound": st.floats(min_value=0.1, max_value=100.0),
                "epsilon": st.floats(min_value=0.01, max_value=10.0),
                "occupancy": st.lists(
                    st.tuples(
                        st.integers(0, 3), st.sampled_from(["a", "b", "c"]), st.integers(1, 9)
                    ),
                    min_size=1,
                    max_size=12,
                    unique_by=lambda t: (t[0], t[1]),
                ),
                "protect_min_error_grid": st.booleans(),
            }
        )
        return [body.flatmap(lambda b: op.as_strategy(positive, body=b))]
    if label.startswith("POST ") and label.endswith(("/releases", "/releases/preview")):
        body = st.fixed_dictionaries(
            {
                "slot_start": st.just(slot),
                "epsilon": st.floats(min_value=0.01, max_value=2.0),
                "clip_user": st.booleans(),
            }
        )
        return [body.flatmap(lambda b: op.as_strategy(positive, path_parameters=fixed, body=b))]
    if label.endswith("/occupancy"):  # one of the release's slots
        return [op.as_strategy(positive, path_parameters=fixed, query={"slot_start": slot})]
    return []


def _runner(
    cases: st.SearchStrategy[Any], keys: tuple[str, ...], codes: Counter[int], checks: list[Any]
) -> Any:
    """One operation's seeded, bounded Hypothesis run: call, count, validate."""

    @hypothesis.seed(SEED)
    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(case=cases, key=st.sampled_from(keys))
    def run(case: Any, key: str) -> None:
        response = case.call(headers={"Authorization": f"Bearer {key}"})
        codes[response.status_code] += 1
        case.validate_response(response, checks=checks)

    return run


def fuzz_every_operation(app: FastAPI) -> None:
    """The fuzzing of :mod:`tests.security.test_fuzz_openapi` on ``app``."""
    with TestClient(app) as client:  # runs the lifespan: the admin key exists
        world = populate(client)
        # a key for DELETE /keys/{key_id} to revoke
        victim = client.post("/keys", json={"name": "victim", "role": "analyst"}, headers=ADMIN)
        documented = DocumentedSchema(client.get("/openapi.json").json())
        release = client.post(
            f"/datasets/{world.dataset_id}/releases",
            json={"slot_start": world.slot_start, "epsilon": 0.01},
            headers=ADMIN,
        )
        assert release.status_code == 200, release.text
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)  # runs its own lifespan
    # Every call carries a real key (below); a missing or bad one is test_authorization's.
    # Left on, negative cases "drop" the declared bearer header, which the call restores.
    schema.config.generation.update(with_security_parameters=False)
    keys = (ADMIN_KEY, world.analyst_key)
    real_ids = {
        "dataset_id": str(world.dataset_id),
        "grid_id": world.grid_ids[0],
        "release_id": release.json()["release_id"],
        "key_id": str(victim.json()["id"]),
    }
    # revocations last: a random id may hit the test's own keys (made active again below)
    operations = sorted(
        (result.ok() for result in schema.get_all_operations()),
        key=lambda op: op.label == "DELETE /keys/{key_id}",
    )
    assert len(operations) >= 15, [op.label for op in operations]
    failures: list[str] = []
    seen: dict[str, Counter[int]] = {}
    for op in operations:
        codes = seen.setdefault(op.label, Counter())
        checks = _checks(op, documented)
        names = {p.name for p in op.path_parameters}
        fixed = {name: real_ids[name] for name in names}
        strategies = [op.as_strategy(GenerationMode.POSITIVE)]
        if fixed:
            strategies.append(op.as_strategy(GenerationMode.POSITIVE, path_parameters=fixed))
        if op.query or op.body or fixed:
            strategies.append(
                op.as_strategy(GenerationMode.NEGATIVE, path_parameters=fixed or None)
            )
        strategies.extend(_guided(op, fixed, world.slot_start) * 2)  # weight: half the cases

        run = _runner(st.one_of(strategies), keys, codes, checks)
        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # report every failing operation
            failures.append(f"{op.label}: {type(exc).__name__}: {str(exc)[:3000]}")
    assert not failures, "\n\n".join(failures)
    # the fuzzing reached the success path of every operation, not only its validation
    unreached = {label: dict(c) for label, c in seen.items() if not any(200 <= k < 300 for k in c)}
    assert not unreached, unreached
    # the fuzzing left the service healthy and the seeded data intact
    with app.state.sessionmaker.begin() as session:
        session.execute(text("update api_keys set revoked_at = null"))
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        resp = client.get(f"/datasets/{world.dataset_id}", headers=ADMIN)
        assert resp.status_code == 200, resp.text
        assert_error(client.get("/datasets/0", headers=ADMIN), 404, "not_found")
        ledger = client.get(f"/datasets/{world.dataset_id}/ledger", headers=ADMIN).json()
        cap = resp.json()["budget_per_user"]
        assert all(u["spent"] <= cap for u in ledger["users"]), ledger
