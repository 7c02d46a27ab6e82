"""Shared helpers of the security tests: the error shape, a populated dataset, crawling."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, csv_for

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
ERROR_CODES = {
    "invalid_request",
    "unauthenticated",
    "forbidden",
    "budget_exhausted",
    "not_found",
    "conflict",
    "idempotency_conflict",
    "payload_too_large",
    "request_timeout",
    "rate_limited",
    "unavailable",
}

# Recognisable raw user identifiers: none of them may ever come back in an answer.
RAW_USERS = {
    CELL_A: {
        "RAWID-bus-0001": [1.0, 2.0, 3.0, 4.0],
        "RAWID-bus-0002": [5.0, 6.0],
        "RAWID-bus-0003": [7.0],
        "RAWID-bus-0004": [0.5, 9.5, 3.0],
    },
    CELL_B: {
        "RAWID-bus-0001": [2.0, 2.0],
        "RAWID-bus-0005": [8.0, 1.0, 4.0],
        "RAWID-bus-0006": [6.0],
    },
}


def assert_error(resp: httpx.Response, status: int | None = None, code: str | None = None) -> None:
    """``resp`` is an error with the documented body ``{"error": {"code", "message"}}``."""
    if status is not None:
        assert resp.status_code == status, (resp.status_code, resp.text[:500])
    assert 400 <= resp.status_code < 600, resp.status_code
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body, dict) and set(body) == {"error"}, body
    fields = {"code", "message"}
    if body["error"].get("code") == "budget_exhausted":  # says what is left (API.md)
        fields.add("largest_epsilon")
        assert body["error"]["largest_epsilon"] >= 0, body
    assert isinstance(body["error"], dict) and set(body["error"]) == fields, body
    assert body["error"]["code"] in ERROR_CODES, body
    if code is not None:
        assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body


@dataclass(frozen=True)
class World:
    """A populated dataset: its id, grid ids, slot, and an analyst key."""

    dataset_id: int
    grid_ids: tuple[str, ...]
    slot_start: str
    analyst_key: str
    analyst_id: int


def post_csv(client: TestClient, dataset_id: int, body: bytes, **params: Any) -> Any:
    """``POST /datasets/{id}/records`` of a CSV ``body`` as the admin."""
    return client.post(
        f"/datasets/{dataset_id}/records",
        params=params,
        content=body,
        headers={**ADMIN, "content-type": "text/csv"},
    )


def populate(client: TestClient | httpx.Client, **dataset: Any) -> World:
    """Create a dataset (U = 10, budget 1000), upload :data:`RAW_USERS`, issue an analyst key."""
    body = {"name": "security", "value_bound": 10.0, "budget_per_user": 1000.0} | dataset
    resp = client.post("/datasets", json=body, headers=ADMIN)
    assert resp.status_code == 201, resp.text
    ds = resp.json()["id"]
    up = client.post(
        f"/datasets/{ds}/records",
        content=csv_for(RAW_USERS).encode(),
        headers={**ADMIN, "content-type": "text/csv"},
    )
    assert up.status_code == 200 and up.json()["accepted"] == 16, up.text
    grids = client.get(f"/datasets/{ds}/grids", headers=ADMIN).json()["grids"]
    assert len(grids) == 2
    key = client.post("/keys", json={"name": "analyst", "role": "analyst"}, headers=ADMIN).json()
    return World(ds, tuple(g["grid_id"] for g in grids), HOUR.isoformat(), key["key"], key["id"])


def n_records(client: TestClient | httpx.Client, world: World) -> int:
    """The world's dataset's stored record count."""
    resp = client.get(f"/datasets/{world.dataset_id}", headers=ADMIN)
    assert resp.status_code == 200, resp.text
    count: int = resp.json()["n_records"]
    return count


def bearer(key: str) -> Mapping[str, str]:
    return {"Authorization": f"Bearer {key}"}


@contextmanager
def postgres_schema(base_url: str, *options: str) -> Iterator[str]:
    """A fresh schema on the shared test server (dropped afterwards); its URL, with extra
    ``-c`` server options (e.g. ``default_transaction_read_only=on``) if given."""
    schema = "t_" + uuid.uuid4().hex[:16]
    admin = create_engine(base_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield with_options(base_url, f"search_path={schema}", *options)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


def with_options(url: str, *options: str) -> str:
    """``url`` with more ``-c name=value`` settings in its libpq ``options``."""
    u = make_url(url)
    current = u.query.get("options", "")
    extra = " ".join(f"-c{o}" for o in options)
    return u.update_query_dict({"options": f"{current} {extra}".strip()}).render_as_string(
        hide_password=False
    )


def csv_upload_scope(path: str, *extra_headers: tuple[bytes, bytes]) -> dict[str, Any]:
    """The ASGI scope of an admin's ``POST`` of a CSV body to ``path`` (for tests that
    drive the application directly, to control how the body arrives)."""
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "client": ("t", 1), "server": ("t", 80),
        "headers": [
            (b"authorization", f"Bearer {ADMIN_KEY}".encode()),
            (b"content-type", b"text/csv"),
            *extra_headers,
        ],
        "state": {},
    }  # fmt: skip
