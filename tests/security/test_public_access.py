"""Without a key: only public releases, the catalogue, /map, /docs, /openapi.json and
health answer; a private release's id is a 401 whether it exists or not; making a
release private closes it on every server process within 1 s; nothing about keys, the
ledger or user hashes shows."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.http.limits import AnonymousLimitMiddleware
from tests.conftest import ADMIN_KEY
from tests.live_server import live_server, seed_grids
from tests.security.support import ADMIN, World

OPEN_PAGES = ("/", "/map", "/docs", "/openapi.json", "/healthz", "/readyz", "/version")


def _release(client: TestClient, world: World, epsilon: float = 0.01) -> str:
    made = client.post(
        f"/datasets/{world.dataset_id}/releases",
        json={"slot_start": world.slot_start, "epsilon": epsilon, "min_users": 1},
        headers=ADMIN,
    )
    assert made.status_code == 200, made.text
    return made.json()["release_id"]


def test_without_a_key_only_the_public_surface_answers(client: TestClient, world: World) -> None:
    private, public = _release(client, world), _release(client, world, 0.02)
    assert client.patch(f"/releases/{public}", json={"public": True}, headers=ADMIN).is_success
    anonymous = TestClient(client.app)
    for path in OPEN_PAGES:
        assert anonymous.get(path).status_code == 200, path
    doc = anonymous.get("/openapi.json").json()
    answered = []
    for path, ops in doc["paths"].items():
        for method in ops:
            url = path.format(dataset_id=world.dataset_id, grid_id=world.grid_ids[0],
                              release_id=public, key_id=1)  # fmt: skip
            params = {"slot_start": world.slot_start} if path.endswith("/occupancy") else {}
            resp = anonymous.request(method.upper(), url, params=params, json={})
            if resp.status_code != 401:
                answered.append((method.upper(), path, resp.status_code))
    assert sorted(answered) == [
        ("GET", "/healthz", 200),
        ("GET", "/public/releases", 200),
        ("GET", "/readyz", 200),
        ("GET", "/releases/{release_id}", 200),
        ("GET", "/releases/{release_id}/footprint", 200),
        ("GET", "/releases/{release_id}/occupancy", 200),
        ("GET", "/version", 200),
    ]
    # the private one, and an id that does not exist, answer alike in every format
    for rid in (private, "0" * 32, "x", "a" * 33):
        for suffix in ("", "?format=csv", "?format=datapackage", "/footprint", "?bogus=1"):
            resp = anonymous.get(f"/releases/{rid}{suffix}")
            assert resp.status_code == 401, (rid, suffix, resp.status_code)
            assert resp.json()["error"]["code"] == "unauthenticated"
            assert "not public (or does not exist)" in resp.json()["error"]["message"]


def test_nothing_about_keys_ledger_or_users_shows_without_a_key(
    client: TestClient, world: World
) -> None:
    rid = _release(client, world)
    assert client.patch(f"/releases/{rid}", json={"public": True}, headers=ADMIN).is_success
    hashes = {u["user"] for u in client.get(
        f"/datasets/{world.dataset_id}/ledger", headers=ADMIN).json()["users"]}  # fmt: skip
    assert hashes
    anonymous = TestClient(client.app)
    seen = ""
    for url in ("/", "/public/releases", f"/releases/{rid}", f"/releases/{rid}/footprint",
                f"/releases/{rid}?format=csv", f"/releases/{rid}?format=geojson",
                f"/releases/{rid}?format=datapackage", "/map"):  # fmt: skip
        resp = anonymous.get(url)
        assert resp.status_code == 200, url
        seen += resp.text + repr(dict(resp.headers))
    assert not [h for h in hashes if h in seen], "a user hash is visible without a key"
    assert ADMIN_KEY not in seen and ADMIN_KEY[:10] not in seen
    assert not re.search(r'"(key_id|prefix|epsilon_spent|ledger|kept)"', seen)


def test_anonymous_readers_are_rate_limited_per_address(app, world: World) -> None:
    limited = AnonymousLimitMiddleware(app, per_minute=5, per_second=0)
    one = TestClient(limited, client=("203.0.113.7", 5000))
    other = TestClient(limited, client=("203.0.113.8", 5000))
    codes = [one.get("/public/releases").status_code for _ in range(7)]
    assert codes == [200] * 5 + [429] * 2
    refused = one.get("/public/releases")
    assert (
        refused.headers["retry-after"] == "1" and refused.json()["error"]["code"] == "rate_limited"
    )
    assert other.get("/public/releases").status_code == 200  # another address: its own
    assert one.get("/healthz").status_code == 200  # probes are never limited
    keyed = one.get("/datasets", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert keyed.status_code == 200  # keys have their own limit
    everyone = TestClient(AnonymousLimitMiddleware(app, per_minute=0, per_second=3))
    assert [everyone.get("/public/releases").status_code for _ in range(4)][-1] == 429


@pytest.mark.slow
def test_making_a_release_private_closes_it_on_every_process_within_a_second(
    migrated_postgres_url: str, tmp_path: Path
) -> None:
    unlimited = {  # one address reads as fast as it can: the limits would answer 429
        "DPGATE_ANONYMOUS_RATE_LIMIT_PER_MINUTE": "0",
        "DPGATE_ANONYMOUS_REQUESTS_PER_SECOND": "0",
    }
    with live_server(migrated_postgres_url, tmp_path, workers=2, extra_env=unlimited) as server:
        users = {(30.2672, -97.7431): {f"u{i}": [1.0, 2.0] for i in range(5)}}
        ds, _ = seed_grids(server.url, ADMIN_KEY, "closing", 100.0, users)
        admin = httpx.Client(base_url=server.url, headers=ADMIN, trust_env=False, timeout=30)
        grids = admin.get(f"/datasets/{ds}/grids").json()["grids"]
        made = admin.post(f"/datasets/{ds}/releases",
                          json={"slot_start": grids[0]["slot_start"], "epsilon": 0.1,
                                "min_users": 1})  # fmt: skip
        rid = made.json()["release_id"]
        assert admin.patch(f"/releases/{rid}", json={"public": True}).is_success
        readers = [httpx.Client(base_url=server.url, trust_env=False) for _ in range(8)]
        etag = readers[0].get(f"/releases/{rid}").headers["etag"]
        assert all(r.get(f"/releases/{rid}").status_code == 200 for r in readers)
        assert admin.patch(f"/releases/{rid}", json={"public": False}).is_success
        closed_at = time.monotonic()
        late = []
        while time.monotonic() - closed_at < 1.5:  # both workers, new and kept connections
            for r in readers:
                for headers in ({}, {"If-None-Match": etag}):
                    status = r.get(f"/releases/{rid}", headers=headers).status_code
                    assert status in (200, 304, 401), status
                    if status != 401:
                        late.append(time.monotonic() - closed_at)
        assert not [t for t in late if t > 1.0], f"still open {max(late):.2f} s after"
