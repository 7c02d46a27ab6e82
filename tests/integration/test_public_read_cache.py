"""Answers to readers without a key are kept for half a second per process
(``app.http.read_cache``): a release closed by another process is closed here within that
time, at once when the change came through this process, and never for a key holder."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient
from sqlalchemy import update

from app.http.read_cache import TTL_SECONDS
from app.observability.metrics import REQUESTS
from app.releases.models import SlotRelease
from tests.integration.test_public_releases import publish, released


def _close_elsewhere(client: TestClient, release_id: str) -> None:
    """Make the release private as another server process would: in the database only."""
    with client.app.state.sessionmaker() as session, session.begin():
        session.execute(
            update(SlotRelease).where(SlotRelease.public_id == release_id).values(public=False)
        )


def _served(route: str, status: str) -> float:
    return REQUESTS.labels("GET", route, status)._value.get()


def test_kept_answers_expire_and_never_reach_key_holders(client: TestClient) -> None:
    _, rid = released(client)
    publish(client, rid)
    anonymous = TestClient(client.app)
    first = anonymous.get(f"/releases/{rid}", params={"format": "csv"})
    counted = _served("/releases/{release_id}", "200")
    _close_elsewhere(client, rid)
    closed_at = time.monotonic()
    again = anonymous.get(f"/releases/{rid}", params={"format": "csv"})
    other_form = anonymous.get(f"/releases/{rid}", params={"format": "geojson"})
    assert time.monotonic() - closed_at < TTL_SECONDS, "too slow to see the kept answer"
    assert again.status_code == 200 and again.content == first.content  # kept
    assert again.headers["x-request-id"] != first.headers["x-request-id"]  # its own id
    # a kept answer is counted under its route, like any other
    assert _served("/releases/{release_id}", "200") == counted + 1
    assert other_form.status_code == 401  # never kept: asked of the database
    assert client.get(f"/releases/{rid}").status_code == 200  # a key: always the database
    time.sleep(TTL_SECONDS + 0.1)
    assert anonymous.get(f"/releases/{rid}", params={"format": "csv"}).status_code == 401


def test_a_change_through_this_process_closes_at_once(client: TestClient) -> None:
    _, rid = released(client)
    publish(client, rid)
    anonymous = TestClient(client.app)
    assert anonymous.get(f"/releases/{rid}").status_code == 200
    assert anonymous.get("/public/releases").json()["releases"]
    publish(client, rid, public=False)
    assert anonymous.get(f"/releases/{rid}").status_code == 401
    assert not anonymous.get("/public/releases").json()["releases"]
