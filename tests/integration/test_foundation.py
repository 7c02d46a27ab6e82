"""The service skeleton: health, docs, error shape, keys and roles."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import ADMIN_KEY


def _error(resp, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def test_healthz_and_docs(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert "/healthz" in spec["paths"]
    assert "ErrorBody" in spec["components"]["schemas"]


def test_unknown_route_and_method_have_error_shape(client: TestClient) -> None:
    _error(client.get("/no/such/route"), 404, "not_found")
    _error(client.delete("/healthz"), 405, "invalid_request")


def test_validation_errors_have_error_shape(client: TestClient) -> None:
    _error(client.post("/keys", json={"name": "x"}), 400, "invalid_request")
    _error(
        client.post("/keys", content=b"{not json", headers={"content-type": "application/json"}),
        400,
        "invalid_request",
    )
    _error(
        client.post("/keys", json={"name": "x", "role": "analyst", "epsilon_quota": -1}),
        400,
        "invalid_request",
    )


def test_auth_roles(client: TestClient) -> None:
    _error(
        client.post("/keys", json={"name": "a", "role": "analyst"}, headers={"Authorization": ""}),
        401,
        "unauthenticated",
    )
    _error(
        client.post(
            "/keys", json={"name": "a", "role": "analyst"}, headers={"Authorization": "Bearer nope"}
        ),
        401,
        "unauthenticated",
    )
    _error(
        client.post(
            "/keys",
            json={"name": "a", "role": "analyst"},
            headers={"Authorization": f"Basic {ADMIN_KEY}"},
        ),
        401,
        "unauthenticated",
    )
    made = client.post("/keys", json={"name": "ana", "role": "analyst", "epsilon_quota": 2.5})
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["role"] == "analyst" and body["key"].startswith("dpg_")
    analyst = {"Authorization": f"Bearer {body['key']}"}
    _error(
        client.post("/keys", json={"name": "b", "role": "admin"}, headers=analyst), 403, "forbidden"
    )


def test_keys_are_stored_hashed(client: TestClient, app) -> None:
    from sqlalchemy import select

    from app.keys.models import ApiKey

    secret = client.post("/keys", json={"name": "h", "role": "analyst"}).json()["key"]
    with app.state.sessionmaker() as session:
        rows = session.scalars(select(ApiKey)).all()
    assert rows and all(secret not in (r.key_hash, r.prefix) for r in rows)
    assert all(r.key_hash != ADMIN_KEY for r in rows)


def test_oversized_json_body_is_413(client: TestClient, app) -> None:
    big = b"x" * (app.state.settings.max_json_body_bytes + 1)
    _error(
        client.post("/keys", content=big, headers={"content-type": "application/json"}),
        413,
        "payload_too_large",
    )


def test_serving_app_freezes_startup_objects_out_of_the_collector(settings, monkeypatch) -> None:
    """``dpgate serve`` builds its app with ``create_server_app``: after start-up every
    long-lived object is frozen, so no full collection walks them mid-request."""
    import gc

    from app.db.migrate import upgrade
    from app.main import create_server_app

    upgrade(settings.database_url)
    monkeypatch.setattr("app.main.get_settings", lambda: settings)
    assert gc.get_freeze_count() == 0
    try:
        with TestClient(create_server_app()) as c:
            assert gc.get_freeze_count() > 10_000  # modules, routes, numpy, OpenDP ...
            assert c.get("/healthz").status_code == 200
    finally:
        gc.unfreeze()


def test_openapi_declares_the_bearer_key_scheme(client: TestClient) -> None:
    """``/docs`` offers *Authorize*: every operation but the health checks needs the key."""
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["APIKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key issued by `POST /keys` or `dpgate keys create`.",
    }
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            keyless = ("/healthz", "/readyz", "/version", "/public/releases")
            expected = None if path in keyless else [{"APIKey": []}]
            assert op.get("security") == expected, (method, path)
            names = {p["name"].lower() for p in op.get("parameters", [])}
            assert "authorization" not in names, (method, path)  # a scheme, not a parameter
