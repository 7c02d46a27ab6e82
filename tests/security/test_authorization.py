"""Who may call what, how keys are kept, and that raw identifiers and records never leave.

The list of admin-only operations is checked against ``/openapi.json``, so a new endpoint
cannot slip in without a decision here.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import inspect
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy import inspect as sa_inspect

import app.keys.service as key_service
from app.uploads.repository import hash_user
from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR
from tests.security.support import ADMIN, RAW_USERS, World, assert_error, bearer

APP_DIR = Path(__file__).resolve().parents[2] / "app"

# Every operation and the least role it needs ("anyone", "viewer", "analyst" or "admin";
# "public": anyone for a public release, a viewer otherwise).
ROLES = {
    ("GET", "/healthz"): "anyone",
    ("GET", "/readyz"): "anyone",
    ("GET", "/version"): "anyone",
    ("GET", "/metrics"): "admin",  # DPGATE_METRICS=admin, the default
    ("POST", "/keys"): "admin",
    ("GET", "/keys"): "admin",
    ("GET", "/keys/me"): "viewer",
    ("DELETE", "/keys/{key_id}"): "admin",
    ("GET", "/datasets"): "viewer",
    ("POST", "/datasets"): "admin",
    ("GET", "/datasets/{dataset_id}"): "viewer",
    ("GET", "/datasets/{dataset_id}/grids"): "viewer",
    ("POST", "/datasets/{dataset_id}/records"): "admin",
    ("GET", "/grids/{grid_id}/mean"): "analyst",
    ("GET", "/grids/{grid_id}/variance"): "analyst",
    ("GET", "/grids/{grid_id}/user_mean"): "analyst",
    ("GET", "/grids/{grid_id}/quote"): "analyst",
    ("GET", "/datasets/{dataset_id}/budget"): "viewer",
    ("GET", "/datasets/{dataset_id}/ledger"): "admin",
    ("POST", "/datasets/{dataset_id}/budget/reset"): "admin",
    ("POST", "/plans/preview"): "analyst",
    ("POST", "/datasets/{dataset_id}/releases"): "analyst",
    ("POST", "/datasets/{dataset_id}/releases/preview"): "analyst",
    ("GET", "/datasets/{dataset_id}/releases"): "viewer",
    ("GET", "/releases/{release_id}"): "public",
    ("GET", "/releases/{release_id}/footprint"): "public",
    ("GET", "/releases/{release_id}/occupancy"): "public",
    ("PATCH", "/releases/{release_id}"): "admin",
    ("GET", "/public/releases"): "anyone",
    ("GET", "/queries"): "analyst",
}


def _operations(client: TestClient) -> list[tuple[str, str]]:
    doc = client.get("/openapi.json").json()
    return sorted((m.upper(), p) for p, ops in doc["paths"].items() for m in ops)


def _victim_key(client: TestClient) -> int:
    """A fresh analyst key to revoke (so revoking it leaves the test's keys working)."""
    from app.keys.service import create_key

    with client.app.state.sessionmaker.begin() as session:  # type: ignore[attr-defined]
        return create_key(session, name="to revoke", role="analyst")[0].id


def _request(client: TestClient, world: World, method: str, path: str, headers: dict) -> Any:
    """A *valid* request to the operation (so only the key decides the outcome)."""
    release_id = ""
    if "{release_id}" in path:  # a stored release to read (the same one each time)
        release_id = client.post(
            f"/datasets/{world.dataset_id}/releases",
            json={"slot_start": world.slot_start, "epsilon": 0.01},
            headers=ADMIN,
        ).json()["release_id"]
    key_id = _victim_key(client) if "{key_id}" in path else 0
    url = path.format(
        dataset_id=world.dataset_id,
        grid_id=world.grid_ids[0],
        release_id=release_id,
        key_id=key_id,
    )
    params: dict[str, Any] = {}
    body: Any = None
    content: bytes | None = None
    if path.endswith(("/mean", "/variance", "/user_mean")):
        params = {"epsilon": 0.01, "mechanism": "baseline"}
    elif path.endswith("/quote"):
        params = {"target_error": 5}
    elif path.endswith("/occupancy"):
        params = {"slot_start": world.slot_start}
    if method == "POST":
        body = {
            "/keys": {"name": "k", "role": "analyst"},
            "/datasets": {"name": "d", "value_bound": 1, "budget_per_user": 1},
            "/plans/preview": {"value_bound": 1, "epsilon": 1, "occupancy": [["g", "u", 1]]},
        }.get(path)
        if path.endswith("/reset"):
            body = {"reason": "authorisation test"}
        elif path.endswith(("/releases", "/releases/preview")):
            body = {"slot_start": world.slot_start, "epsilon": 0.01}
        elif path.endswith("/records"):
            content = b"user_id,timestamp,lat,lon,value\n"
            headers = {**headers, "content-type": "text/csv"}
    if method == "PATCH":
        body = {"public": False}
    if content is not None:
        return client.request(method, url, params=params, content=content, headers=headers)
    return client.request(method, url, params=params, json=body, headers=headers)


def test_the_role_table_covers_every_operation(client: TestClient) -> None:
    assert set(_operations(client)) == set(ROLES)


BAD_AUTH = [
    {},  # no header
    {"Authorization": ""},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer "},
    {"Authorization": "Bearer nope"},
    {"Authorization": f"Basic {ADMIN_KEY}"},
    {"Authorization": f"Token {ADMIN_KEY}"},
    {"Authorization": ADMIN_KEY},
    {"Authorization": f"Bearer {ADMIN_KEY.upper()}"},
    {"Authorization": f"Bearer {ADMIN_KEY[:-1]}"},
    {"Authorization": f"Bearer {ADMIN_KEY}x"},
    {"Authorization": f"Bearer {hashlib.sha256(ADMIN_KEY.encode()).hexdigest()}"},  # the hash
    {"Authorization": f"Bearer {ADMIN_KEY[:10]}"},  # the stored prefix
    {"Authorization": "Bearer ' OR '1'='1"},
]


def test_every_operation_refuses_missing_and_unknown_keys(client: TestClient, world: World) -> None:
    anonymous = TestClient(client.app)  # no default Authorization header
    for method, path in _operations(client):
        if ROLES[(method, path)] == "anyone":
            assert _request(anonymous, world, method, path, {}).status_code == 200
            continue
        for headers in BAD_AUTH:
            resp = _request(anonymous, world, method, path, dict(headers))
            assert_error(resp, 401, "unauthenticated")


def test_admin_operations_refuse_analyst_keys(client: TestClient, world: World) -> None:
    analyst = bearer(world.analyst_key)
    quota = client.post(
        "/keys", json={"name": "q", "role": "analyst", "epsilon_quota": 5}, headers=ADMIN
    ).json()["key"]
    for method, path in _operations(client):
        role = ROLES[(method, path)]
        for key in (analyst, bearer(quota)):
            resp = _request(client, world, method, path, dict(key))
            if role == "admin":
                assert_error(resp, 403, "forbidden")
            else:
                assert resp.status_code < 300, (method, path, resp.text)
        # the admin may do everything
        resp = _request(client, world, method, path, dict(ADMIN))
        assert resp.status_code < 300, (method, path, resp.text)


def test_viewers_read_and_never_spend(client: TestClient, world: World) -> None:
    viewer = client.post("/keys", json={"name": "v", "role": "viewer"}, headers=ADMIN).json()
    for method, path in _operations(client):
        resp = _request(client, world, method, path, dict(bearer(viewer["key"])))
        if ROLES[(method, path)] in ("analyst", "admin"):
            assert_error(resp, 403, "forbidden")
        else:
            assert resp.status_code < 300, (method, path, resp.text)


def test_authentication_comes_before_validation(client: TestClient, world: World) -> None:
    """A caller without a valid key learns nothing from validation or lookups."""
    no_key = TestClient(client.app)
    analyst = bearer(world.analyst_key)
    cases = [
        ("POST", "/keys", {"json": {"bogus": 1}}),
        ("POST", "/datasets", {"json": {"name": "", "value_bound": "nan"}}),
        ("GET", "/datasets/999999/ledger", {}),
        ("POST", "/datasets/999999/budget/reset", {"json": {}}),
        ("POST", "/datasets/999999/records", {"content": b"\xff\xfe"}),
    ]  # fmt: skip
    for method, url, kwargs in cases:
        headers = kwargs.pop("headers", {})
        assert_error(no_key.request(method, url, headers=headers, **kwargs), 401)
        assert_error(client.request(method, url, headers={**headers, **analyst}, **kwargs), 403)
    assert_error(no_key.get("/grids/unknown/mean", params={"epsilon": "nan"}), 401)


def test_keys_are_stored_as_hashes_only(client: TestClient, app: FastAPI) -> None:
    made = client.post("/keys", json={"name": "stored", "role": "analyst"}, headers=ADMIN).json()
    secret = made["key"]
    assert len(secret) >= 40 and secret.startswith("dpg_")  # >= 256 bits from secrets
    dump = _database_text(app)
    assert hashlib.sha256(secret.encode()).hexdigest() in dump  # the lookup hash is there
    for s in (secret, ADMIN_KEY):
        assert s not in dump and s[4:] not in dump and s[-20:] not in dump
    # the key is shown once: nothing lists it again
    for url in ("/datasets", "/openapi.json"):
        assert secret not in client.get(url, headers=ADMIN).text


def test_key_comparison_is_constant_time(
    client: TestClient, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored hash is compared with ``hmac.compare_digest`` whenever a key is looked up
    (the row lookup and the cache of recent keys go by the SHA-256 of a 256-bit secret:
    their timing reveals nothing usable); no ``==``/``!=`` on secrets or hashes in app/keys."""
    calls: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(key_service.hmac, "compare_digest", spy)
    # a per-process cache of recently seen keys (keyed by the digest) may answer first
    monkeypatch.setattr(key_service, "_auth_cache", {}, raising=False)
    assert client.get("/datasets", headers=bearer(world.analyst_key)).status_code == 200
    digest = hashlib.sha256(world.analyst_key.encode()).hexdigest()
    assert (digest, digest) in calls
    calls.clear()
    assert client.get("/datasets", headers=ADMIN).status_code == 200
    assert calls, "the admin key was not compared with compare_digest"

    source = inspect.getsource(key_service.lookup_identity)
    assert "compare_digest" in source
    for module in sorted((APP_DIR / "keys").glob("*.py")):
        tree = ast.parse(module.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
            ):
                if _is_sql_column(node.left):  # ApiKey.key_hash == x builds SQL, not a compare
                    continue
                names = {
                    n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
                    for n in ast.walk(node)
                    if isinstance(n, ast.Name | ast.Attribute)
                }
                assert not names & {"secret", "key_hash", "digest", "authorization"}, (
                    f"{module.name}:{node.lineno} compares a secret with =="
                )


def _is_sql_column(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ApiKey"
    )


def test_ledger_shows_keyed_hashes_only(client: TestClient, world: World, app: FastAPI) -> None:
    for grid in world.grid_ids:
        resp = client.get(f"/grids/{grid}/mean", params={"epsilon": 0.5, "mechanism": "baseline"})
        assert resp.status_code == 200, resp.text
    users = client.get(f"/datasets/{world.dataset_id}/ledger", headers=ADMIN).json()["users"]
    raw = {u for grid in RAW_USERS.values() for u in grid}
    secret = app.state.hash_secret
    expected = {hmac.new(secret, u.encode(), hashlib.sha256).hexdigest() for u in raw}
    assert {u["user"] for u in users} == expected
    for u in users:
        assert re.fullmatch(r"[0-9a-f]{64}", u["user"])
    # keyed: the plain SHA-256 of an id (which anyone can compute) is not what is shown,
    # and another secret gives other hashes
    plain = {hashlib.sha256(u.encode()).hexdigest() for u in raw}
    assert not plain & {u["user"] for u in users}
    assert not {hash_user(b"another secret", u) for u in raw} & expected
    # nor is a raw id stored anywhere in the database
    dump = _database_text(app)
    assert not [u for u in raw if u in dump]


def _database_text(app: FastAPI) -> str:
    """Every table's every row, as text."""
    url = app.state.settings.database_url
    engine = create_engine(url)
    parts: list[str] = []
    try:
        with engine.connect() as conn:
            for table in sa_inspect(conn).get_table_names():
                for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                    parts.append(repr(tuple(row)))
    finally:
        engine.dispose()
    return "\n".join(parts)


# ---------------------------------------------------------------- crawling

DISTINCT = [3.17293841, 2.68471952, 1.93857264, 4.28173645, 0.73829164, 5.91736482]
RAW_TIMES = {f"2024-03-05T10:{m:02d}:{s:02d}" for m in (0, 16) for s in range(1, 8)}


def _distinct_csv() -> str:
    lines = ["user_id,timestamp,lat,lon,value"]
    users = {
        CELL_A: {"RAWID-alpha": DISTINCT[:3], "RAWID-beta": DISTINCT[3:5]},
        CELL_B: {"RAWID-alpha": DISTINCT[5:], "RAWID-gamma": [DISTINCT[0] + 1]},
    }
    for k, ((lat, lon), per_user) in enumerate(users.items()):
        for user, values in per_user.items():
            for i, v in enumerate(values):
                ts = HOUR.replace(minute=16 * k, second=i + 1).isoformat()
                lines.append(f"{user},{ts},{lat},{lon},{v}")
    return "\n".join(lines) + "\n"


def _leaks(text_: str) -> list[str]:
    found = ["RAWID"] if "RAWID" in text_ else []
    found += [str(v) for v in DISTINCT if str(v)[:7] in text_]
    found += [t for t in RAW_TIMES if t in text_]
    return found


def test_no_endpoint_returns_raw_ids_or_records(client: TestClient) -> None:
    # the detector detects: the id marker, every value, the 4 distinct raw timestamps
    assert len(_leaks(_distinct_csv())) == 1 + len(DISTINCT) + 4
    ds = client.post(
        "/datasets", json={"name": "crawl", "value_bound": 10, "budget_per_user": 100}
    ).json()["id"]
    up = client.post(
        f"/datasets/{ds}/records",
        content=_distinct_csv().encode(),
        headers={"content-type": "text/csv"},
    )
    assert up.status_code == 200 and up.json()["accepted"] == 7, up.text
    assert not _leaks(up.text)
    # a rejected row of a known user: the reason must not echo the raw id either
    bad = client.post(
        f"/datasets/{ds}/records",
        content=b"user_id,timestamp,lat,lon,value\nRAWID-alpha,not-a-time,30.2,-97.7,1\n",
        headers={"content-type": "text/csv"},
    )
    assert bad.status_code == 200 and bad.json()["rejected"] == 1, bad.text
    assert not _leaks(bad.text), bad.text
    grids = [g["grid_id"] for g in client.get(f"/datasets/{ds}/grids").json()["grids"]]
    # spend a little through every mechanism and a Clip-User release (its "removed" lists users)
    answers: list[str] = []
    from app.core import MEAN_MECHANISMS, VARIANCE_MECHANISMS

    for grid in grids:
        for mech in MEAN_MECHANISMS:
            r = client.get(f"/grids/{grid}/mean", params={"epsilon": 0.5, "mechanism": mech})
            assert r.status_code == 200, (mech, r.text)
            answers.append(r.text)
        for mech in VARIANCE_MECHANISMS:
            r = client.get(f"/grids/{grid}/variance", params={"epsilon": 0.5, "mechanism": mech})
            assert r.status_code == 200, (mech, r.text)
            answers.append(r.text)
    rel = client.post(
        f"/datasets/{ds}/releases",
        json={"slot_start": HOUR.isoformat(), "epsilon": 0.01, "clip_user": True},
    )
    assert rel.status_code == 200, rel.text
    answers.append(rel.text)
    # crawl every GET operation of the schema with every id we know
    doc = client.get("/openapi.json").json()
    crawled = 0
    for path, ops in doc["paths"].items():
        if "get" not in ops:
            continue
        params = {p["name"] for p in ops["get"].get("parameters", []) if p["in"] == "query"}
        fills = [{}]
        if "grid_id" in path:
            fills = [{"grid_id": g} for g in grids]
        elif "dataset_id" in path:
            fills = [{"dataset_id": ds}]
        elif "release_id" in path:
            fills = [{"release_id": rel.json()["release_id"]}]
        for fill in fills:
            query: dict = {"epsilon": 0.5} if "epsilon" in params else {}
            if "slot_start" in params and "release_id" in path:
                query["slot_start"] = HOUR.isoformat()
            if "target_error" in params:
                query["target_error"] = 3
            url = path.format(**{k: quote(str(v), safe="") for k, v in fill.items()})
            r = client.get(url, params=query, headers=ADMIN)
            assert r.status_code == 200, (url, r.text)
            answers.append(r.text + repr(dict(r.headers)))
            crawled += 1
    assert crawled >= 10
    leaks = {i: _leaks(a) for i, a in enumerate(answers) if _leaks(a)}
    assert not leaks, {i: (found, answers[i][:300]) for i, found in leaks.items()}
