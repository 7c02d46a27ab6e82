"""Issue 16 (trust hardening), in process: the pinned hashing
secret, value filters as declared policy, key listing and revocation, idempotency
conflicts, ``largest_epsilon``, odd ids and option values, 405 ``Allow``, readiness."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import func, select, text, update

from app.config import Settings
from app.db.migrate import upgrade
from app.instance.service import SecretMismatch, fingerprint
from app.keys.models import ApiKey
from app.keys.service import _AUTH_TTL_S
from app.ledger.models import BudgetReset
from app.main import create_app
from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import HOUR
from tests.security.support import ADMIN, World, assert_error, bearer, populate, post_csv

CSV = "user_id,timestamp,lat,lon,value\n"


def _csv(rows: list[tuple[str, int, float]]) -> bytes:
    lines = [f"{u},{HOUR.timestamp() + t:.0f},30.2672,-97.7431,{v}" for u, t, v in rows]
    return (CSV + "\n".join(lines) + "\n").encode()


def _app(settings: Settings, **update: Any) -> FastAPI:
    upgrade(settings.database_url)
    return create_app(settings.model_copy(update=update))


# ------------------------------------------------------------ 1. hashing secret


def test_another_secret_is_refused_and_the_first_one_still_works(settings: Settings) -> None:
    first = _app(settings)
    with TestClient(first) as client:
        populate(client)
    with pytest.raises(SecretMismatch, match="DPGATE_SECRET_KEY"):
        _app(settings, secret_key=SecretStr("another-secret"))
    again = _app(settings)  # the original secret: same identities
    assert again.state.hash_secret == first.state.hash_secret == b"test-secret"


def test_a_secret_file_is_created_once_and_pinned(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "data" / "city-secret.key"
    key_file.parent.mkdir()
    secrets = []
    for cwd in ("one", "two"):  # another working directory: the same secret
        (tmp_path / cwd).mkdir()
        monkeypatch.chdir(tmp_path / cwd)
        app = _app(Settings(database_url=postgres_url, admin_key=ADMIN_KEY, secret_file=key_file))
        secrets.append(app.state.hash_secret)
        assert not (tmp_path / cwd / "dpgate-secret.key").exists()
    assert secrets[0] == secrets[1] == key_file.read_bytes().strip()
    assert (key_file.stat().st_mode & 0o777) == 0o600
    # the file replaced by another secret: refused, not silently a second identity
    key_file.write_text("f" * 64)
    with pytest.raises(SecretMismatch, match="DPGATE_SECRET_KEY"):
        _app(Settings(database_url=postgres_url, admin_key=ADMIN_KEY, secret_file=key_file))


def test_without_a_secret_a_generated_one_is_kept_in_the_database(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plain = Settings(database_url=postgres_url, admin_key=ADMIN_KEY)
    first, second = _app(plain), _app(plain)
    assert first.state.hash_secret == second.state.hash_secret
    assert len(first.state.hash_secret) == 64  # 256 random bits, hex
    assert not list(tmp_path.iterdir())  # nothing written to the working directory
    with first.state.engine.connect() as conn:
        stored = conn.execute(text("select secret_fingerprint from dpgate_instance")).scalar()
    assert stored == fingerprint(first.state.hash_secret)
    with pytest.raises(SecretMismatch):
        _app(plain, secret_key=SecretStr("now-a-configured-one"))


def test_settings_refuse_placeholders_and_short_admin_keys() -> None:
    from pydantic import ValidationError

    for bad in ("change-me-admin-key", "short-key-of-23-chars!!"):
        with pytest.raises(ValidationError, match="admin_key"):
            Settings(admin_key=bad)
    with pytest.raises(ValidationError, match="secret_key"):
        Settings(secret_key="change-me-secret")
    assert Settings(admin_key="x" * 24).admin_key is not None


# --------------------------------------------------------------- 2. value filters


def test_value_filters_need_a_dataset_that_declares_them_public(client: TestClient) -> None:
    private = client.post(
        "/datasets", json={"name": "p", "value_bound": 10, "budget_per_user": 1}, headers=ADMIN
    ).json()
    assert private["value_filters_public"] is False
    body = _csv([("bus", 0, 0.0), ("bus", 60, 12.0), ("bus", 120, 3.0)])
    for params in ({"drop_zero": "true"}, {"out_of_range": "reject"}):
        resp = post_csv(client, private["id"], body, **params)
        assert_error(resp, 400, "invalid_request")
        assert "value_filters_public" in resp.json()["error"]["message"]
    assert client.get(f"/datasets/{private['id']}", headers=ADMIN).json()["n_records"] == 0
    assert post_csv(client, private["id"], body).json()["accepted"] == 3  # clamp: allowed

    public = client.post(
        "/datasets",
        json={"name": "q", "value_bound": 10, "budget_per_user": 1, "value_filters_public": True},
        headers=ADMIN,
    ).json()
    answer = post_csv(client, public["id"], body, drop_zero="true", out_of_range="reject").json()
    assert (answer["accepted"], answer["dropped_zero"], answer["rejected"]) == (1, 1, 1)


# ---------------------------------------------------------------------- 4. keys


def test_keys_are_listed_for_admins_and_me_says_what_is_left(
    client: TestClient, world: World
) -> None:
    quota = client.post(
        "/keys", json={"name": "q", "role": "analyst", "epsilon_quota": 2}, headers=ADMIN
    ).json()
    listed = client.get("/keys", headers=ADMIN).json()["keys"]
    assert {k["name"] for k in listed} >= {"analyst", "q"}
    assert all(k["revoked"] is False and "key" not in k for k in listed)
    assert_error(client.get("/keys", headers=bearer(world.analyst_key)), 403, "forbidden")

    grid = world.grid_ids[0]
    for key, eps in ((quota["key"], 0.5), (world.analyst_key, 0.25)):  # not a cached twin
        params = {"epsilon": eps, "mechanism": "baseline"}
        ok = client.get(f"/grids/{grid}/mean", params=params, headers=bearer(key))
        assert ok.status_code == 200 and not ok.json()["cached"], ok.text
    me = client.get("/keys/me", headers=bearer(quota["key"])).json()
    assert me == {
        "id": quota["id"],
        "name": "q",
        "role": "analyst",
        "epsilon_quota": 2.0,
        "epsilon_spent": 0.5,
        "epsilon_remaining": 1.5,
    }
    free = client.get("/keys/me", headers=bearer(world.analyst_key)).json()
    assert (free["epsilon_quota"], free["epsilon_spent"], free["epsilon_remaining"]) == (
        None, 0.25, None,
    )  # fmt: skip


def test_a_revoked_key_is_refused_at_once(client: TestClient, world: World) -> None:
    analyst = bearer(world.analyst_key)
    assert client.get("/datasets", headers=analyst).status_code == 200  # now cached
    assert_error(client.delete(f"/keys/{world.analyst_id}", headers=analyst), 403, "forbidden")
    assert client.delete(f"/keys/{world.analyst_id}", headers=ADMIN).status_code == 204
    assert_error(client.get("/datasets", headers=analyst), 401, "unauthenticated")
    assert client.delete(f"/keys/{world.analyst_id}", headers=ADMIN).status_code == 204
    assert_error(client.delete("/keys/999999", headers=ADMIN), 404, "not_found")
    listed = {k["id"]: k for k in client.get("/keys", headers=ADMIN).json()["keys"]}
    assert listed[world.analyst_id]["revoked"] is True


def test_a_demoted_or_revoked_admin_loses_access_within_a_second(
    client: TestClient, app: FastAPI, world: World
) -> None:
    """Changed behind the process's back (another process, or by hand in the database);
    waited out: the process's key cache time and a tenth of a second, well within one."""
    waited = _AUTH_TTL_S + 0.1
    assert waited < 1.0
    made = client.post("/keys", json={"name": "a2", "role": "admin"}, headers=ADMIN).json()
    second = bearer(made["key"])
    ledger = f"/datasets/{world.dataset_id}/ledger"
    assert client.get(ledger, headers=second).status_code == 200
    with app.state.sessionmaker.begin() as session:
        session.execute(update(ApiKey).where(ApiKey.id == made["id"]).values(role="analyst"))
    time.sleep(waited)
    assert_error(client.get(ledger, headers=second), 403, "forbidden")
    with app.state.sessionmaker.begin() as session:
        session.execute(update(ApiKey).where(ApiKey.id == made["id"]).values(revoked_at=func.now()))
    time.sleep(waited)
    assert_error(client.get("/datasets", headers=second), 401, "unauthenticated")


def test_the_bootstrap_admin_key_is_made_active_again_at_start_up(
    settings: Settings, client: TestClient
) -> None:
    me = client.get("/keys/me", headers=ADMIN).json()
    # (the last active admin key cannot be revoked: another admin exists meanwhile)
    assert client.post("/keys", json={"name": "2nd", "role": "admin"}, headers=ADMIN).is_success
    assert client.delete(f"/keys/{me['id']}", headers=ADMIN).status_code == 204
    assert_error(client.get("/keys/me", headers=ADMIN), 401, "unauthenticated")
    with TestClient(_app(settings)) as restarted:  # DPGATE_ADMIN_KEY still set
        assert restarted.get("/keys/me", headers=ADMIN).json()["id"] == me["id"]


# --------------------------------------------------------------- 6. idempotency


def test_budget_reset_with_an_idempotency_key_happens_once(
    client: TestClient, app: FastAPI, world: World
) -> None:
    url = f"/datasets/{world.dataset_id}/budget/reset"
    key = {**ADMIN, "Idempotency-Key": "reset-2016-11-25"}
    first = client.post(url, json={"reason": "new week"}, headers=key)
    assert first.status_code == 200 and first.json() == {"epoch": 2}
    again = client.post(url, json={"reason": "new week"}, headers=key)
    assert again.json() == {"epoch": 2} and again.headers["Idempotent-Replayed"] == "true"
    other = client.post(url, json={"reason": "another reason"}, headers=key)
    assert_error(other, 422, "idempotency_conflict")
    with app.state.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(BudgetReset)) == 1
    assert client.post(url, json={"reason": "no key"}, headers=ADMIN).json() == {"epoch": 3}


def test_an_upload_key_reused_on_another_path_or_query_conflicts(client: TestClient) -> None:
    a = client.post(
        "/datasets", json={"name": "a", "value_bound": 10, "budget_per_user": 1}, headers=ADMIN
    ).json()
    body = _csv([("bus", 0, 1.0)])
    headers = {**ADMIN, "content-type": "text/csv", "Idempotency-Key": "k1"}
    url = f"/datasets/{a['id']}/records"
    assert client.post(url, content=body, headers=headers).status_code == 200
    same = client.post(url, content=body, headers=headers)
    assert same.status_code == 200 and same.headers["Idempotent-Replayed"] == "true"
    changed = client.post(url, content=body, headers=headers, params={"delimiter": ","})
    assert_error(changed, 422, "idempotency_conflict")


# ----------------------------------------------------------- 7. largest_epsilon


def _mean(client: TestClient, grid: str, eps: float, key: dict, mechanism: str = "baseline"):
    return client.get(
        f"/grids/{grid}/mean", params={"epsilon": eps, "mechanism": mechanism}, headers=key
    )


def test_budget_refusals_say_the_largest_epsilon_left(client: TestClient) -> None:
    world = populate(client, budget_per_user=1.0)
    grid, analyst = world.grid_ids[0], bearer(world.analyst_key)
    assert _mean(client, grid, 0.625, analyst).status_code == 200
    refused = _mean(client, grid, 0.5, analyst)
    assert_error(refused, 403, "budget_exhausted")
    assert refused.json()["error"]["largest_epsilon"] == 0.375
    assert _mean(client, grid, 0.375, analyst).status_code == 200  # it really is answerable
    refused = _mean(client, grid, 0.001, analyst, "clip")
    assert refused.json()["error"]["largest_epsilon"] == 0


def test_quota_refusals_say_the_largest_epsilon_left(client: TestClient) -> None:
    world = populate(client)
    quota = client.post(
        "/keys", json={"name": "q", "role": "analyst", "epsilon_quota": 1}, headers=ADMIN
    ).json()
    grid = world.grid_ids[0]
    assert _mean(client, grid, 0.75, bearer(quota["key"])).status_code == 200
    refused = _mean(client, grid, 0.5, bearer(quota["key"]))
    assert_error(refused, 403, "budget_exhausted")
    assert refused.json()["error"]["largest_epsilon"] == 0.25
    assert _mean(client, grid, 0.25, bearer(quota["key"])).status_code == 200


def test_exclude_refusals_offer_the_most_any_user_has_left(client: TestClient) -> None:
    """With ``exclude`` a query is answered while one user can pay: the largest epsilon
    is the most budget any user of the grid has left."""
    world = populate(client, budget_per_user=1.0, on_exhausted="exclude")
    grid_a, grid_b = world.grid_ids
    analyst = bearer(world.analyst_key)
    assert _mean(client, grid_a, 1.0, analyst).status_code == 200  # grid A's users: 0 left
    refused = _mean(client, grid_a, 0.5, analyst)
    assert_error(refused, 403, "budget_exhausted")
    assert refused.json()["error"]["largest_epsilon"] == 0
    # grid B shares one user with grid A: the others still have all of it
    assert _mean(client, grid_b, 0.75, analyst).status_code == 200
    refused = _mean(client, grid_b, 0.5, analyst)
    assert refused.json()["error"]["largest_epsilon"] == 0.25


# --------------------------------------------------------------- 8. odd input


def test_a_clip_length_beyond_64_bits_is_400(client: TestClient, world: World) -> None:
    for statistic in ("mean", "variance"):
        for m in ("9223372036854775808", "-9223372036854775809", "1" + "0" * 40):
            resp = client.get(
                f"/grids/{world.grid_ids[0]}/{statistic}",
                params={"epsilon": 0.1, "mechanism": "clip", "m": m},
                headers=ADMIN,
            )
            assert_error(resp, 400, "invalid_request")
        largest = client.get(
            f"/grids/{world.grid_ids[0]}/{statistic}",
            params={"epsilon": 0.1, "mechanism": "clip", "m": "9223372036854775807"},
            headers=ADMIN,
        )
        assert largest.status_code == 200, largest.text


@pytest.mark.parametrize("spelling", ["١", "01", "+1", "1.0", "1e0", " 1", "0x1", "١٠"])
def test_every_path_parses_ids_the_same_way(
    shared_client: TestClient, shared_world: World, spelling: str
) -> None:
    """Refusals only (each checks its 404), so the spellings share one app and world."""
    client, world = shared_client, shared_world
    assert world.dataset_id == 1
    for path in ("", "/grids", "/budget", "/ledger"):
        assert client.get(f"/datasets/1{path}", headers=ADMIN).status_code == 200
        assert_error(client.get(f"/datasets/{spelling}{path}", headers=ADMIN), 404, "not_found")
    release = client.post(
        f"/datasets/{spelling}/releases",
        json={"slot_start": world.slot_start, "epsilon": 0.1},
        headers=ADMIN,
    )
    assert_error(release, 404, "not_found")
    assert_error(client.delete(f"/keys/{spelling}", headers=ADMIN), 404, "not_found")


# ------------------------------------------------------------- 10. 405 and docs


def test_405_says_which_methods_are_allowed(client: TestClient) -> None:
    for method, path, allowed in (
        ("PUT", "/keys", "GET, POST"),
        ("DELETE", "/datasets", "GET, POST"),
        ("POST", "/keys/me", "GET"),  # /keys/{key_id} takes digits only
        ("PATCH", "/keys/5", "DELETE"),
        ("POST", "/healthz", "GET"),
        ("POST", "/openapi.json", "GET, HEAD"),
    ):
        resp = client.request(method, path, headers=ADMIN)
        assert_error(resp, 405, "invalid_request")
        assert resp.headers["allow"] == allowed, (method, path, resp.headers)


def test_openapi_declares_the_real_constraints(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    for statistic in ("mean", "variance"):
        op = doc["paths"][f"/grids/{{grid_id}}/{statistic}"]["get"]
        (eps,) = [p for p in op["parameters"] if p["name"] == "epsilon"]
        assert eps["schema"]["minimum"] == 1e-6 and "exclusiveMinimum" not in eps["schema"]
        assert {"403", "404", "409"} <= set(op["responses"])
    create = doc["components"]["schemas"]["DatasetCreate"]["properties"]
    assert "1440" in create["timeslot_minutes"]["description"]
    assert "value_filters_public" in create
    detail = doc["components"]["schemas"]["ErrorDetail"]["properties"]
    assert "largest_epsilon" in detail


# ---------------------------------------------------------------- 11. readiness


def test_readyz_answers_when_the_database_does(client: TestClient) -> None:
    # Without a key, on the client whose event loop owns the app's asyncio pool (a second
    # TestClient runs each request on a loop of its own, where that pool cannot be used).
    for path, body in (("/readyz", {"status": "ready"}), ("/healthz", {"status": "ok"})):
        request = client.build_request("GET", path)
        del request.headers["Authorization"]
        assert client.send(request).json() == body
