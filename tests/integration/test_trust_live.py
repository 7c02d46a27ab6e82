"""Issue 16 end to end: real ``dpgate serve`` processes (a changed hashing secret, key
revocation across processes on one Postgres, a client hanging up mid-upload)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import csv_for
from tests.live_server import free_port, live_server
from tests.security.support import ADMIN, RAW_USERS, World, assert_error, bearer, populate


def _cli(args: list[str], db_url: str, cwd: Path, secret: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DPGATE_DATABASE_URL": db_url,
        "DPGATE_ADMIN_KEY": ADMIN_KEY,
        "DPGATE_SECRET_KEY": secret,
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _populate_at(url: str) -> World:
    with httpx.Client(base_url=url, timeout=30) as c:
        return populate(c)


def _upload_again(server_url: str, dataset_id: int) -> dict:
    with httpx.Client(base_url=server_url, headers=ADMIN, timeout=30) as c:
        resp = c.post(
            f"/datasets/{dataset_id}/records",
            content=csv_for(RAW_USERS).encode(),
            headers={"content-type": "text/csv"},
        )
        assert resp.status_code == 200, resp.text
        detail = c.get(f"/datasets/{dataset_id}").json()
    return {"accepted": resp.json()["accepted"], "n_users": detail["n_users"]}


@pytest.mark.slow
def test_serve_refuses_a_changed_secret(db_url: str, tmp_path: Path) -> None:
    with live_server(db_url, tmp_path, workers=1, extra_env={"DPGATE_SECRET_KEY": "a" * 32}) as s:
        world = _populate_at(s.url)
    for command in (["serve", "--port", str(free_port())], ["migrate"]):
        refused = _cli(command, db_url, tmp_path, secret="b" * 32)
        assert refused.returncode != 0, refused
        assert "DPGATE_SECRET_KEY" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr, refused.stderr
    # the first secret still serves, and the same CSV meets the same identities
    with live_server(db_url, tmp_path, workers=1, extra_env={"DPGATE_SECRET_KEY": "a" * 32}) as s:
        assert _upload_again(s.url, world.dataset_id) == {"accepted": 0, "n_users": 6}


@pytest.mark.slow
def test_without_a_secret_another_working_directory_keeps_the_identities(
    postgres_url: str, tmp_path: Path
) -> None:
    db_url = postgres_url  # the generated secret is kept in the database itself
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    no_secret = {"DPGATE_SECRET_KEY": ""}  # empty: unset
    with live_server(db_url, one, workers=1, extra_env=no_secret) as s:
        world = _populate_at(s.url)
    with live_server(db_url, two, workers=1, extra_env=no_secret) as s:
        assert _upload_again(s.url, world.dataset_id) == {"accepted": 0, "n_users": 6}
    assert not list(one.glob("*.key")) and not list(two.glob("*.key"))


@pytest.mark.slow
def test_a_revoked_key_is_refused_by_every_process_within_a_second(
    postgres_url: str, tmp_path: Path
) -> None:
    with (
        live_server(postgres_url, tmp_path, workers=1) as a,
        live_server(postgres_url, tmp_path, workers=1) as b,
    ):
        with httpx.Client(base_url=a.url, timeout=30) as c:
            world = populate(c)
            extra = c.post("/keys", json={"name": "a2", "role": "admin"}, headers=ADMIN).json()
        clients = [httpx.Client(base_url=s.url, timeout=30) for s in (a, b)]
        try:
            for c in clients:  # both processes know (and cache) both keys
                assert c.get("/datasets", headers=bearer(world.analyst_key)).status_code == 200
                assert c.get("/keys", headers=bearer(extra["key"])).status_code == 200
            for key_id, secret in ((world.analyst_id, world.analyst_key), (extra["id"], None)):
                revoked = clients[0].delete(f"/keys/{key_id}", headers=ADMIN)
                assert revoked.status_code == 204
                t0 = time.monotonic()
                secret = secret or extra["key"]
                assert_error(clients[0].get("/datasets", headers=bearer(secret)), 401)
                while clients[1].get("/datasets", headers=bearer(secret)).status_code != 401:
                    assert time.monotonic() - t0 < 1.0, "still accepted after 1 s"
                    time.sleep(0.02)
                # the revoked admin cannot mint a key on the other process either
                minted = clients[1].post(
                    "/keys", json={"name": "x", "role": "admin"}, headers=bearer(secret)
                )
                assert_error(minted, 401, "unauthenticated")
        finally:
            for c in clients:
                c.close()


@pytest.mark.slow
def test_a_client_hanging_up_mid_upload_is_logged_as_such(
    postgres_url: str, tmp_path: Path
) -> None:
    with live_server(postgres_url, tmp_path, workers=1) as s:
        with httpx.Client(base_url=s.url, timeout=30) as c:
            world = populate(c)
        host, port = s.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            head = (
                f"POST /datasets/{world.dataset_id}/records HTTP/1.1\r\n"
                f"Host: {host}\r\nAuthorization: Bearer {ADMIN_KEY}\r\n"
                "Content-Type: text/csv\r\nContent-Length: 100000\r\n\r\n"
            )
            sock.sendall(head.encode() + b"user_id,timestamp,lat,lon,value\nbus,1,1,1,1\n")
            time.sleep(0.5)
        deadline = time.monotonic() + 10
        while "client disconnected" not in s.log.read_text():
            assert time.monotonic() < deadline, s.log.read_text()[-2000:]
            time.sleep(0.1)
        with httpx.Client(base_url=s.url, headers=ADMIN, timeout=30) as c:
            assert c.get(f"/datasets/{world.dataset_id}").json()["n_records"] == 16
        log = s.log.read_text()
    assert "unhandled error" not in log and "Traceback" not in log, log[-3000:]


def test_start_up_refuses_a_placeholder_or_short_admin_key(
    postgres_url: str, tmp_path: Path
) -> None:
    db_url = postgres_url
    for bad in ("change-me-admin-key", "too-short-admin-key"):
        env = {**os.environ, "DPGATE_DATABASE_URL": db_url, "DPGATE_ADMIN_KEY": bad}
        refused = subprocess.run(
            [sys.executable, "-m", "app.cli", "migrate"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert refused.returncode == 2, refused
        assert "DPGATE_ADMIN_KEY" in refused.stderr and "Traceback" not in refused.stderr
