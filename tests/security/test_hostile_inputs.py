"""Hand-written hostile requests.

Non-finite, huge, negative, zero and over-the-cap epsilons; unknown and malformed
ids; SQL-injection-like strings in every path, query and JSON string field (and in
CSV column names and cells; awkward CSV files: test_hostile_csv.py). Each is refused
(or accepted) with the documented error shape, charges nothing, writes nothing, and
leaves the database intact.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from tests.integration.grid_fixtures import CELL_A, HOUR
from tests.security.support import ADMIN, World, assert_error, bearer, n_records

BAD_EPSILONS = [
    "nan", "NaN", "-nan", "inf", "+inf", "-inf", "Infinity", "-Infinity", "1e308", "1e309",
    "-1", "-1e-9", "0", "-0", "0.0", "1e-400", "5e-324", "1e-7", "10.000001", "11", "1e6",
    "", " ", "abc", "0x1", "1,5", "[1]", "1e",
]  # fmt: skip

INJECTIONS = [
    "' OR '1'='1",
    "1 OR 1=1",
    "1; DROP TABLE api_keys; --",
    "'; DELETE FROM budget_accounts; --",
    '" OR ""="',
    "%' OR 1=1 --",
    "%",
    "_",
    "1 UNION SELECT key_hash FROM api_keys --",
    "1'; SELECT pg_sleep(3); --",
    "1); SELECT sqlite_version(); --",
    "\\x00'\x00",
    "../../../../etc/passwd",
    "${jndi:ldap://x}",
    "{{7*7}}",
]


def _spent(client: TestClient, world: World) -> float:
    return client.get(f"/datasets/{world.dataset_id}/budget", headers=ADMIN).json()["max_spent"]


# ------------------------------------------------------------------- epsilons


@pytest.mark.parametrize("statistic", ["mean", "variance"])
def test_bad_epsilons_are_refused_and_charge_nothing(
    client: TestClient, world: World, statistic: str
) -> None:
    grid = world.grid_ids[0]
    for eps in BAD_EPSILONS:
        for mechanism in ("baseline", "clip", "auto"):
            resp = client.get(
                f"/grids/{grid}/{statistic}",
                params={"epsilon": eps, "mechanism": mechanism},
                headers=bearer(world.analyst_key),
            )
            assert resp.status_code in (400, 422), (eps, resp.text)
            assert_error(resp, code="invalid_request")
    assert _spent(client, world) == 0
    # the cap itself (max_epsilon_per_query = 10) and a tiny valid epsilon are answered
    for eps in ("10", "1e-6"):
        ok = client.get(f"/grids/{grid}/{statistic}", params={"epsilon": eps}, headers=ADMIN)
        assert ok.status_code == 200, ok.text
        assert float(ok.json()["epsilon"]) <= float(eps)


def test_bad_epsilons_in_json_bodies(client: TestClient, world: World) -> None:
    """Python's json accepts NaN/Infinity literals; so must the validation refuse them."""
    for raw in ("NaN", "Infinity", "-Infinity", "1e308", "1e999", "0", "-1", "10.5", '"x"', "null"):
        release = f'{{"slot_start": "{world.slot_start}", "epsilon": {raw}, "clip_user": true}}'
        resp = client.post(
            f"/datasets/{world.dataset_id}/releases",
            content=release.encode(),
            headers={**ADMIN, "content-type": "application/json"},
        )
        assert resp.status_code in (400, 422), (raw, resp.text)
        assert_error(resp, code="invalid_request")
        if raw == "10.5":  # over the dataset's cap, but a preview has no dataset
            continue
        preview = f'{{"value_bound": 10, "epsilon": {raw}, "occupancy": [[0, 0, 1]]}}'
        resp = client.post(
            "/plans/preview",
            content=preview.encode(),
            headers={**ADMIN, "content-type": "application/json"},
        )
        assert resp.status_code in (400, 422), (raw, resp.text)
        assert_error(resp, code="invalid_request")
    for field, raw in [
        ("budget_per_user", "NaN"), ("budget_per_user", "Infinity"), ("budget_per_user", "0"),
        ("budget_per_user", "1e308"), ("max_epsilon_per_query", "-Infinity"),
        ("max_epsilon_per_query", "1e300"), ("value_bound", "NaN"), ("value_bound", "1e308"),
    ]:  # fmt: skip
        body = {"name": "x", "value_bound": 10, "budget_per_user": 1} | {field: "@"}
        text = json.dumps(body).replace('"@"', raw)
        resp = client.post(
            "/datasets",
            content=text.encode(),
            headers={**ADMIN, "content-type": "application/json"},
        )
        assert_error(resp, 400, "invalid_request")
    quota = '{"name": "k", "role": "analyst", "epsilon_quota": NaN}'
    resp = client.post(
        "/keys", content=quota.encode(), headers={**ADMIN, "content-type": "application/json"}
    )
    assert_error(resp, 400, "invalid_request")
    for target in ("nan", "inf", "-1", "0", "1e309"):
        resp = client.get(
            f"/grids/{world.grid_ids[0]}/quote", params={"target_error": target}, headers=ADMIN
        )
        assert resp.status_code in (400, 422), (target, resp.text)
        assert_error(resp, code="invalid_request")
    assert _spent(client, world) == 0


def test_large_but_valid_budgets_are_stored_exactly(client: TestClient) -> None:
    """The documented maxima fit the ledger's ``NUMERIC(24, 12)``."""
    made = client.post(
        "/datasets",
        json={
            "name": "big",
            "value_bound": 1e12,
            "budget_per_user": 1e6,
            "max_epsilon_per_query": 1e6,
        },
        headers=ADMIN,
    )
    assert made.status_code == 201, made.text
    got = client.get(f"/datasets/{made.json()['id']}", headers=ADMIN).json()
    assert got["budget_per_user"] == 1e6 and got["max_epsilon_per_query"] == 1e6
    key = client.post(
        "/keys", json={"name": "big", "role": "analyst", "epsilon_quota": 1e6}, headers=ADMIN
    )
    assert key.status_code == 201, key.text
    for field in ("budget_per_user", "max_epsilon_per_query"):
        over = client.post(
            "/datasets",
            json={"name": "x", "value_bound": 1, "budget_per_user": 1} | {field: 1e6 * 1.0001},
            headers=ADMIN,
        )
        assert_error(over, 400, "invalid_request")


# ------------------------------------------------------------------------ ids

BAD_GRID_IDS = [
    "nope", "x" * 33, "x" * 5000, "%2e%2e%2f", "..", "a b", "ü", "🙂", "-", "0", "null",
    "%00", "%ff", "a%0Ab",
]  # fmt: skip
BAD_DATASET_IDS = [
    "0", "-1", "2147483648", "99999999999999999999999", "1e3", "0x1", "1.5", "nan", "abc",
    "%00", "x" * 5000,
]  # fmt: skip


def test_stored_limits_round_down_never_up(client: TestClient) -> None:
    """A limit with more than the ledger's 12 decimals is stored rounded **down**: a
    user is never charged past the ``budget_per_user`` given, and a key's quota reads
    the same in ``POST /keys`` and ``/keys/me``."""
    made = client.post(
        "/datasets",
        json={"name": "fine", "value_bound": 10.0, "budget_per_user": 0.0000010000001,
              "max_epsilon_per_query": 0.0000010000001},
        headers=ADMIN,
    )  # fmt: skip
    assert made.status_code == 201, made.text
    got = client.get(f"/datasets/{made.json()['id']}", headers=ADMIN).json()
    assert got["budget_per_user"] == 1e-6 and got["max_epsilon_per_query"] == 1e-6
    tiny = client.post(
        "/datasets",
        json={"name": "tiny", "value_bound": 10.0, "budget_per_user": 1e-13},
        headers=ADMIN,
    )
    assert_error(tiny, 400, "invalid_request")
    third = 0.3333333333333333
    key = client.post(
        "/keys", json={"name": "third", "role": "analyst", "epsilon_quota": third},
        headers=ADMIN,
    )  # fmt: skip
    assert key.status_code == 201, key.text
    me = client.get("/keys/me", headers={"Authorization": f"Bearer {key.json()['key']}"})
    assert me.json()["epsilon_quota"] == key.json()["epsilon_quota"] == 0.333333333333
    assert me.json()["epsilon_remaining"] == 0.333333333333


def test_unknown_and_malformed_ids(client: TestClient, world: World) -> None:
    for gid in BAD_GRID_IDS:
        for stat in ("mean", "variance"):
            resp = client.get(f"/grids/{gid}/{stat}", params={"epsilon": 1}, headers=ADMIN)
            assert resp.status_code in (400, 404), (gid, resp.text)
            assert_error(resp)
        resp = client.get(f"/grids/{gid}/quote", params={"target_error": 1}, headers=ADMIN)
        assert resp.status_code in (400, 404), (gid, resp.text)
    for did in BAD_DATASET_IDS:
        for path in ("", "/grids", "/budget", "/ledger"):
            resp = client.get(f"/datasets/{did}{path}", headers=ADMIN)
            assert resp.status_code in (400, 404), (did, path, resp.text)
            assert_error(resp)
        resp = client.post(
            f"/datasets/{did}/records",
            content=b"user_id,timestamp,lat,lon,value\n",
            headers={**ADMIN, "content-type": "text/csv"},
        )
        assert resp.status_code in (400, 404), (did, resp.text)
        assert_error(resp)
        for path, body in (
            ("/budget/reset", {"reason": "x"}),
            ("/releases", {"slot_start": world.slot_start, "epsilon": 1}),
        ):
            resp = client.post(f"/datasets/{did}{path}", json=body, headers=ADMIN)
            assert resp.status_code in (400, 404), (did, path, resp.text)
            assert_error(resp)
    # a well-formed id one character away from a real one reaches the lookup: 404
    real = world.grid_ids[0]
    near = real[:-1] + ("A" if real[-1] != "A" else "B")
    assert_error(client.get(f"/grids/{near}/mean", params={"epsilon": 1}), 404, "not_found")
    assert _spent(client, world) == 0
    # the ledger's paging and epoch are bounded: absurd values are refused, never a 500
    for name in ("epoch", "offset", "limit"):
        for value in ("-1", "2147483648", "99999999999999999999", "1e3", "nan"):
            resp = client.get(
                f"/datasets/{world.dataset_id}/ledger", params={name: value}, headers=ADMIN
            )
            assert_error(resp, 400, "invalid_request")


# ------------------------------------------------------------- SQL injection


def _operations(client: TestClient) -> list[tuple[str, str, dict[str, Any]]]:
    doc = client.get("/openapi.json").json()
    return [(m.upper(), p, op) for p, ops in doc["paths"].items() for m, op in ops.items()]


def _valid_request(
    world: World, method: str, path: str
) -> tuple[dict[str, str], dict[str, str], Any]:
    """Valid path values, query and body for an operation (to vary one field at a time)."""
    path_values = {
        "dataset_id": str(world.dataset_id),
        "grid_id": world.grid_ids[0],
        "release_id": "0" * 32,  # no such release: 404, the fields around it are what vary
        "key_id": "999999",  # no such key: revoking it answers 404 and changes nothing
    }
    query: dict[str, str] = {}
    body: Any = None
    if path.endswith(("/mean", "/variance")):
        query = {"epsilon": "0.001", "mechanism": "baseline"}
    elif path.endswith("/quote"):
        query = {"target_error": "5", "statistic": "mean"}
    elif path.endswith("/grids"):
        query = {"slot_start": world.slot_start, "h3_cell": "8848c1e0c9fffff"}
    elif path.endswith("/ledger"):
        query = {"epoch": "1"}
    elif path.endswith("/records"):
        query = {"user_col": "user_id", "time_col": "timestamp", "out_of_range": "clamp"}
        body = "user_id,timestamp,lat,lon,value\n"
    if method == "POST":
        body = {
            "/keys": {"name": "k", "role": "analyst"},
            "/datasets": {"name": "d", "value_bound": 1, "budget_per_user": 1, "timezone": "UTC"},
            "/plans/preview": {"value_bound": 1, "epsilon": 1, "occupancy": [["g", "u", 1]]},
        }.get(path, body)
        if path.endswith("/reset"):
            body = {"reason": "audit"}
        if path.endswith(("/releases", "/releases/preview")):
            body = {"slot_start": world.slot_start, "epsilon": 0.001, "clip_user": True}
    return path_values, query, body


def _send(client: TestClient, method: str, path: str, values: dict, query: dict, body: Any) -> Any:
    url = path.format(**{k: quote(v, safe="") for k, v in values.items()})
    if isinstance(body, str):
        return client.request(
            method, url, params=query, content=body.encode(),
            headers={**ADMIN, "content-type": "text/csv"},
        )  # fmt: skip
    return client.request(method, url, params=query, json=body, headers=ADMIN)


def _checked(resp: Any, started: float, what: object) -> None:
    assert resp.status_code < 500, (what, resp.status_code, resp.text)
    assert time.monotonic() - started < 2.5, (what, "slow: an injected sleep ran?")
    if resp.status_code >= 400:
        assert_error(resp)


@pytest.mark.slow
def test_injection_strings_in_every_field(client: TestClient, world: World) -> None:
    for method, path, op in _operations(client):
        if path in ("/openapi.json", "/docs"):
            continue
        values, query, body = _valid_request(world, method, path)
        params = [p for p in op.get("parameters", []) if p["in"] in ("path", "query")]
        for payload in INJECTIONS:
            for param in params:
                v, q = dict(values), dict(query)
                (v if param["in"] == "path" else q)[param["name"]] = payload
                started = time.monotonic()
                _checked(_send(client, method, path, v, q, body), started, (path, param, payload))
            # an injected query parameter *name* (the statistic endpoints read options)
            started = time.monotonic()
            q = {**query, payload: "1"}
            _checked(_send(client, method, path, values, q, body), started, (path, payload))
            if isinstance(body, dict):
                for field, value in body.items():
                    if isinstance(value, str):
                        b = {**body, field: payload}
                        started = time.monotonic()
                        resp = _send(client, method, path, values, query, b)
                        _checked(resp, started, (path, field, payload))
    # the tables are intact and nothing was charged or written by the payloads
    assert client.get("/healthz").status_code == 200
    assert client.get(f"/datasets/{world.dataset_id}", headers=ADMIN).json()["n_records"] == 16
    listed = client.get(f"/datasets/{world.dataset_id}/grids", headers=ADMIN).json()
    assert len(listed["grids"]) == 2
    # a LIKE wildcard is not a filter: '%' and '_' match no cell
    for wildcard in ("%", "_", "8848c1e0c9%"):
        got = client.get(
            f"/datasets/{world.dataset_id}/grids", params={"h3_cell": wildcard}, headers=ADMIN
        )
        assert got.status_code in (200, 400, 422) and (
            got.status_code != 200 or got.json()["grids"] == []
        ), got.text
    assert client.get("/datasets", headers=bearer(world.analyst_key)).status_code == 200


def test_injection_strings_in_csv_columns_and_cells(client: TestClient, world: World) -> None:
    before = n_records(client, world)
    ts = (HOUR.replace(minute=30)).isoformat()
    for payload in INJECTIONS:
        # as a column-name parameter: the header does not have it -> 400, nothing written
        resp = client.post(
            f"/datasets/{world.dataset_id}/records",
            params={"user_col": payload},
            content=b"user_id,timestamp,lat,lon,value\nu,2024-03-05T10:00:00Z,30.2,-97.7,1\n",
            headers={**ADMIN, "content-type": "text/csv"},
        )
        assert_error(resp, 400, "invalid_request")
        # as a cell: a user id is only ever hashed; the other fields are rejected per row
        cells = [
            [payload, ts, CELL_A[0], CELL_A[1], 1],
            ["inj-user", payload, CELL_A[0], CELL_A[1], 1],
            ["inj-user", ts, payload, CELL_A[1], 1],
            ["inj-user", ts, CELL_A[0], CELL_A[1], payload],
        ]
        lines = ["user_id,timestamp,lat,lon,value"]
        lines += [",".join(json.dumps(str(c)) for c in row) for row in cells]
        resp = client.post(
            f"/datasets/{world.dataset_id}/records",
            content=("\n".join(lines) + "\n").encode(),
            headers={**ADMIN, "content-type": "text/csv"},
        )
        assert resp.status_code == 200, (payload, resp.text)
        out = resp.json()
        assert out["rejected"] == 3 and out["accepted"] + out["duplicates"] == 1, (payload, out)
    after = n_records(client, world)
    assert after == before + len({p.strip() for p in INJECTIONS if p.strip()})
