"""What a budget reset waits for (docs/math.md §10.4): not for queries or releases in
flight (they hold the dataset row ``FOR KEY SHARE``), and for an upload of the same
dataset only a bounded time, then 409 with a message saying why."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.config import Settings
from app.ledger import service as ledger


def _dataset(client: TestClient) -> int:
    r = client.post("/datasets", json={"name": "locks", "value_bound": 10, "budget_per_user": 1})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _hold(settings: Settings, ds: int, mode: str):
    """An open transaction holding the dataset row in ``mode`` (the caller ends it)."""
    assert settings.database_url is not None
    engine = create_engine(settings.database_url)
    conn = engine.connect()
    epoch = conn.execute(
        text(f"SELECT epoch FROM datasets WHERE id = :d FOR {mode}"), {"d": ds}
    ).scalar_one()
    return engine, conn, epoch


def test_reset_does_not_wait_for_a_release_in_flight(
    pg_client: TestClient, pg_settings: Settings
) -> None:
    ds = _dataset(pg_client)
    engine, held, epoch = _hold(pg_settings, ds, "KEY SHARE")  # as a release holds it
    try:
        start = time.monotonic()
        reset = pg_client.post(f"/datasets/{ds}/budget/reset", json={"reason": "test"})
        took = time.monotonic() - start
        assert reset.status_code == 200, reset.text
        assert reset.json()["epoch"] == epoch + 1
        assert took < 2.0, took
        # the transaction in flight keeps the epoch it read (its charges land there)
        assert epoch == 1
    finally:
        held.close()
        engine.dispose()
    assert pg_client.get(f"/datasets/{ds}/budget").json()["epoch"] == 2


def test_reset_during_an_upload_answers_409_after_a_bounded_wait(
    pg_client: TestClient, pg_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger, "RESET_WAIT_SECONDS", 0.5)
    ds = _dataset(pg_client)
    engine, held, _ = _hold(pg_settings, ds, "NO KEY UPDATE")  # as an upload holds it
    try:
        start = time.monotonic()
        reset = pg_client.post(f"/datasets/{ds}/budget/reset", json={"reason": "test"})
        took = time.monotonic() - start
    finally:
        held.close()
        engine.dispose()
    assert reset.status_code == 409, reset.text
    assert "upload" in reset.json()["error"]["message"]
    assert 0.5 <= took < 5.0, took
    # nothing changed; once the upload ended the reset goes through
    assert pg_client.get(f"/datasets/{ds}/budget").json()["epoch"] == 1
    again = pg_client.post(f"/datasets/{ds}/budget/reset", json={"reason": "test"})
    assert again.status_code == 200 and again.json()["epoch"] == 2
