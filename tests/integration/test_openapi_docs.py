"""The OpenAPI document teaches (issue 17): mechanism enums, every option declared on the
right endpoints, described answer fields, readable citations, real examples; and every
route of it refuses a query parameter it does not declare."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app import core
from app.answers.examples import example_answer
from app.answers.schemas import StatisticAnswer
from app.queries.openapi import example_quote
from app.queries.schemas import QuoteOut
from tests.conftest import new_schema
from tests.integration.grid_fixtures import CELL_A, analyst, load, make_dataset

#: The mean mechanisms API.md names (the contract), besides the registry's additions.
API_MEAN = {
    "baseline", "array_avg_wrap", "array_avg_bestfit", "levy", "quantile_fixed",
    "quantile_optimized", "opt_array", "opt_array_convex", "clip", "worst_case_optimal",
    "auto",
}  # fmt: skip
API_VARIANCE = {"baseline", "clip", "auto"}
API_MD = Path(__file__).resolve().parents[3] / "shared" / "API.md"
STAT_PATHS = {"mean": "/grids/{grid_id}/mean", "variance": "/grids/{grid_id}/variance"}


@pytest.fixture(scope="module")
def doc(postgres_base_url: str, postgres_admin: Engine) -> dict[str, Any]:
    """The document of an app on a throwaway schema (generation needs no data)."""
    from app.config import Settings
    from app.db.migrate import upgrade
    from app.main import create_app

    with new_schema(postgres_base_url, postgres_admin) as url:
        upgrade(url)
        app = create_app(Settings(database_url=url, secret_key="s"))
        return app.openapi()


def _params(doc: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    op = doc["paths"][path]["get"]
    return {p["name"]: p for p in op["parameters"] if p["in"] == "query"}


def test_api_md_mechanisms_are_the_contract() -> None:
    if not API_MD.is_file():
        pytest.skip(f"{API_MD} not found (the shared contract lives outside the repository)")
    text = API_MD.read_text()
    block = text[text.index("Mean mechanisms:") : text.index("Their meaning")]
    assert set(re.findall(r"`([a-z_]+)`", block)) == API_MEAN
    row = next(line for line in text.splitlines() if "/variance`" in line)
    assert {"baseline", "clip", "auto"} <= set(re.findall(r"`([a-z_]+)`", row))


@pytest.mark.parametrize(
    ("statistic", "contract"), [("mean", API_MEAN), ("variance", API_VARIANCE)]
)
def test_mechanism_is_an_enum_of_the_registry(doc, statistic: str, contract: set[str]) -> None:
    mechanism = _params(doc, STAT_PATHS[statistic])["mechanism"]
    enum = mechanism["schema"]["enum"]
    registry = core.MEAN_MECHANISMS if statistic == "mean" else core.VARIANCE_MECHANISMS
    assert enum == list(registry) and contract <= set(enum)
    assert mechanism["schema"]["default"] == "auto"
    if statistic == "mean":
        assert "centred_clip" in enum
    description = doc["paths"][STAT_PATHS[statistic]]["get"]["description"]
    assert all(f"`{name}`" in description for name in registry)


@pytest.mark.parametrize("statistic", ["mean", "variance"])
def test_every_option_is_declared_on_its_endpoint(doc, statistic: str) -> None:
    registry = core.MEAN_MECHANISMS if statistic == "mean" else core.VARIANCE_MECHANISMS
    declared = _params(doc, STAT_PATHS[statistic])
    readers: dict[str, set[str]] = {}
    for name, spec in registry.items():
        for opt in spec.options.values():
            readers.setdefault(opt.name, set()).add(name)
            param = declared[opt.name]
            schema = param["schema"]
            variants = schema.get("anyOf", [schema])
            kind = {"int": "integer", "float": "number", "bool": "boolean", "choice": "string"}
            assert any(v["type"] == kind[opt.type] for v in variants), (opt, schema)
            if opt.minimum is not None:
                bound = "exclusiveMinimum" if opt.exclusive else "minimum"
                assert any(v.get(bound) == opt.minimum for v in variants), (opt, schema)
            if opt.maximum is not None:
                bound = "exclusiveMaximum" if opt.exclusive else "maximum"
                assert any(v.get(bound) == opt.maximum for v in variants), (opt, schema)
            if opt.choices:
                assert any(v.get("enum") == list(opt.choices) for v in variants)
            assert f"`{name}`" in param["description"] or name in param["description"]
            assert param["required"] is False and len(param["description"]) > 20
    for option, mechanisms in readers.items():
        assert set(declared[option]["x-mechanisms"]) == mechanisms
    # nothing else is declared: the statistic's own parameters and the release plan
    assert set(declared) == {*readers, "epsilon", "mechanism", "plan"}
    other = core.VARIANCE_MECHANISMS if statistic == "mean" else core.MEAN_MECHANISMS
    own = {o for spec in registry.values() for o in spec.options}
    foreign = {o for spec in other.values() for o in spec.options} - own
    assert not foreign & set(declared)


@pytest.mark.parametrize("statistic", ["mean", "variance"])
def test_no_declared_default_conflicts_with_a_mechanism(doc, statistic: str) -> None:
    """Try it out sends every declared default: an option gets one only when every
    mechanism reads it (none does today), and its description states each default;
    ``epsilon``, ``mechanism`` and ``objective`` come first."""
    registry = core.MEAN_MECHANISMS if statistic == "mean" else core.VARIANCE_MECHANISMS
    params = _params(doc, STAT_PATHS[statistic])
    for name, param in params.items():
        if name in ("epsilon", "mechanism", "plan"):
            continue
        readers = set(param["x-mechanisms"])
        if "default" in param["schema"]:
            assert readers == set(registry), (name, readers)
        for mechanism in readers:
            default = registry[mechanism].options[name].default
            if default is not None:
                assert f"`{json.dumps(default)}`" in param["description"], (name, mechanism)
    assert list(params)[:3] == ["epsilon", "mechanism", "objective"]
    assert params["mechanism"]["schema"]["default"] == "auto"


def test_answer_fields_are_described_for_a_newcomer(doc) -> None:
    schemas = doc["components"]["schemas"]
    props = schemas["StatisticAnswer"]["properties"]
    for field in props:
        assert len(props[field].get("description", "")) > 10, field
    assert "one user" in props["sensitivity"]["description"]
    assert "Laplace" in props["noise_scale"]["description"]
    assert "95%" in props["ci95"]["description"]
    assert "null" in props["worst_case_bias"]["description"].lower()
    assert "null" in props["worst_case_error"]["description"].lower()
    quote = schemas["QuoteOut"]["properties"]
    assert "worst-case error" in quote["target_error"]["description"]
    target = _params(doc, "/grids/{grid_id}/quote")["target_error"]
    assert "worst-case error" in target["description"]


def test_citations_are_titles_not_spec_numbers(doc) -> None:
    """The query endpoints and their schemas cite papers by title (the releases
    endpoints' texts belong to the releases work)."""
    import json

    mine = {p: op for p, op in doc["paths"].items() if p.startswith(("/grids/", "/queries"))}
    schemas = doc["components"]["schemas"]
    parts = [mine, [schemas[n] for n in ("StatisticAnswer", "QuoteOut", "StoredAnswerList")]]
    text = json.dumps(parts, ensure_ascii=False)
    assert "SPEC §" not in text and "SPEC§" not in text
    found = re.search(r".{0,60}\b00[0-4] (§|Alg|Thm|eq|Lemma|Prop).{0,20}", text)
    assert found is None, found
    assert "Mean Estimation with User-Level Privacy for Spatio-Temporal IoT Datasets" in text


def test_examples_are_real_answers(doc) -> None:
    schemas = doc["components"]["schemas"]
    mean, var, user_mean = schemas["StatisticAnswer"]["examples"]
    nullable = ("worst_case_bias", "worst_case_error", "ci95", "ci95_note")
    examples = (
        (mean, "mean", 65.0),
        (var, "variance", 65.0**2 / 4),
        (user_mean, "user_mean", 65.0),
    )
    for ex, statistic, top in examples:
        # FastAPI writes the OpenAPI document without nulls: a missing field here is a null
        ex = {**dict.fromkeys(nullable), **ex}
        StatisticAnswer.model_validate(ex)
        assert ex["statistic"] == statistic and ex["requested_mechanism"] == "auto"
        assert 0 <= ex["estimate"] <= top
        if ex["ci95"] is None:
            assert ex["ci95_note"]
        else:
            assert ex["ci95"][0] <= ex["estimate"] <= ex["ci95"][1]
        assert ex["n_users"] == 40 and ex["epsilon"] == 1.0
        assert ex["sensitivity"] > 0 and ex["noise_scale"] > 0
    assert user_mean["ci95"] is not None  # every user_mean answer has its honest interval
    # the example is what the engine answers for the example grid (same plan, fresh noise)
    again = example_answer("mean")
    assert {k: v for k, v in again.items() if v is not None} == {
        k: v for k, v in mean.items() if v is not None
    }  # made once per process
    assert QuoteOut.model_validate(schemas["QuoteOut"]["examples"][0]) == QuoteOut.model_validate(
        example_quote()
    )
    quote = example_quote()
    assert quote["achievable"] and quote["epsilon"] is not None


# ---- unknown query parameters --------------------------------------------------------------


def _concrete(path: str, ids: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: ids.get(m.group(1), "1"), path)


def test_every_route_refuses_an_unknown_query_parameter(client: TestClient) -> None:
    ds = make_dataset(client)
    grid = load(client, ds, {CELL_A: {"u1": [1.0], "u2": [2.0, 3.0]}})[CELL_A]
    created = client.post("/keys", json={"name": "x", "role": "analyst", "epsilon_quota": None})
    key = created.json()
    ids = {"dataset_id": str(ds), "grid_id": grid, "id": str(key["id"]), "key_id": str(key["id"])}
    doc = client.get("/openapi.json").json()
    checked = 0
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
            assert "zz_unknown" not in declared
            resp = client.request(
                method.upper(),
                _concrete(path, ids),
                params={"zz_unknown": "1"},
                json={} if "requestBody" in op else None,
            )
            assert resp.status_code == 400, (method, path, resp.text)
            error = resp.json()["error"]
            assert error["code"] == "invalid_request" and "zz_unknown" in error["message"]
            checked += 1
    assert checked >= 15
    # the DELETE changed nothing: the key still works
    still = client.get(f"/datasets/{ds}/budget", headers={"Authorization": f"Bearer {key['key']}"})
    assert still.status_code == 200, still.text


def test_the_key_is_checked_before_the_parameters(client: TestClient) -> None:
    ds = make_dataset(client)
    no_key = client.get(
        f"/datasets/{ds}/grids", params={"sortx": "1"}, headers={"Authorization": ""}
    )
    assert no_key.status_code == 401
    analyst_key = analyst(client)
    wrong_role = client.get(f"/datasets/{ds}/ledger", params={"zz": "1"}, headers=analyst_key)
    assert wrong_role.status_code == 403
    assert client.get("/healthz", params={"zz": "1"}).status_code == 400  # no key needed there
    many = client.get("/healthz", params={f"p{i}" + "x" * 100: "1" for i in range(30)})
    assert many.status_code == 400 and len(many.json()["error"]["message"]) < 1000
    assert "and 20 more" in many.json()["error"]["message"]


def test_declared_parameters_still_pass(client: TestClient) -> None:
    ds = make_dataset(client)
    grid = load(client, ds, {CELL_A: {"u1": [1.0], "u2": [2.0, 3.0], "u3": [4.0]}})[CELL_A]
    hdr = analyst(client)
    ok = client.get(
        f"/grids/{grid}/mean",
        params={"epsilon": 0.1, "mechanism": "levy", "gamma": 0.3},
        headers=hdr,
    )
    assert ok.status_code == 200, ok.text
    assert client.get(f"/datasets/{ds}/grids", params={"limit": 5}).status_code == 200
    quote = client.get(f"/grids/{grid}/quote", params={"target_error": 5, "mechanism": "levy"})
    assert quote.status_code == 400 and "mechanism" in quote.json()["error"]["message"]
    # an option of another mechanism is refused by the mechanism, not ignored
    other = client.get(
        f"/grids/{grid}/mean", params={"epsilon": 0.1, "mechanism": "baseline", "gamma": 0.3}
    )
    assert other.status_code == 400 and "gamma" in other.json()["error"]["message"]
    # unknown parameters are refused before anything is charged
    refused = client.get(f"/grids/{grid}/variance", params={"epsilon": 0.1, "sort": "x"})
    assert refused.status_code == 400
    budget = client.get(f"/datasets/{ds}/budget").json()
    assert budget["max_spent"] == pytest.approx(0.1)


def test_a_new_registry_entry_is_documented_without_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the auto work adds to ``app.core.mechanisms.registry`` appears in the documentation."""
    from types import MappingProxyType

    from app.core.mechanisms.option_spec import MechanismSpec, OptionSpec
    from app.queries import openapi

    extra = OptionSpec("zz_share", "float", 0.5, "share (math.md §4, 004 eq. 11)", 0.0, 1.0, True)
    spec = MechanismSpec("zz_new", "a new one (003 Thm III.1)", False, {"zz_share": extra})
    table = MappingProxyType({**core.MEAN_MECHANISMS, "zz_new": spec})
    monkeypatch.setattr(core, "MEAN_MECHANISMS", table)
    assert openapi.mechanism_schema("mean")["enum"][-1] == "zz_new"
    described = openapi.mechanism_description("mean")
    assert "`zz_new`: a new one (“Bounding User Contributions" in described
    param = next(p for p in openapi.option_parameters("mean") if p["name"] == "zz_share")
    assert param["x-mechanisms"] == ["zz_new"]
    # read by one mechanism of many: its default is described, not declared
    assert param["schema"] == {"type": "number", "exclusiveMinimum": 0.0, "exclusiveMaximum": 1.0}
    assert "(default `0.5`)" in param["description"]
    assert "math.md §4" in param["description"] and "004 eq" not in param["description"]


def test_joint_mechanisms_have_a_schema_too() -> None:
    from app.queries import openapi

    assert openapi.mechanism_schema("joint") == {"enum": list(core.JOINT_MECHANISMS)}
    names = {p["name"] for p in openapi.option_parameters("joint")}
    assert {"split", "m"} <= names
