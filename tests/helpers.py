"""Small helpers shared by the integration tests (datasets, uploads, keys)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fastapi.testclient import TestClient

DEFAULT_HEADER = ("user_id", "timestamp", "lat", "lon", "value")

DATASET_DEFAULTS: dict[str, Any] = {
    "name": "test dataset",
    "value_bound": 65.0,
    "h3_resolution": 8,
    "timeslot_minutes": 60,
    "timezone": "UTC",
    "budget_per_user": 10.0,
    "max_epsilon_per_query": 10.0,
    "on_exhausted": "refuse",
}


def create_dataset(client: TestClient, **overrides: Any) -> dict[str, Any]:
    """``POST /datasets`` with test defaults (U=65, res 8, 60 min, UTC, budget 10); the answer."""
    resp = client.post("/datasets", json={**DATASET_DEFAULTS, **overrides})
    assert resp.status_code == 201, resp.text
    return resp.json()


def make_csv(
    rows: Iterable[Sequence[Any] | Mapping[str, Any]], header: Sequence[str] | None = None
) -> str:
    """CSV text with a header line. ``rows`` are sequences (in ``header`` order, default
    ``user_id,timestamp,lat,lon,value``) or mappings (the header defaults to the keys of
    the first one)."""
    rows = list(rows)
    if header is None:
        header = list(rows[0]) if rows and isinstance(rows[0], Mapping) else DEFAULT_HEADER
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([row.get(h, "") for h in header] if isinstance(row, Mapping) else row)
    return out.getvalue()


def upload_csv(
    client: TestClient,
    dataset_id: int,
    text_or_bytes: str | bytes,
    *,
    headers: Mapping[str, str] | None = None,
    **params: Any,
) -> dict[str, Any]:
    """``POST /datasets/{id}/records`` (query ``params``, e.g. ``drop_zero=True``); asserts 200."""
    resp = post_csv(client, dataset_id, text_or_bytes, headers=headers, **params)
    assert resp.status_code == 200, resp.text
    return resp.json()


def post_csv(
    client: TestClient,
    dataset_id: int | str,
    text_or_bytes: str | bytes,
    *,
    headers: Mapping[str, str] | None = None,
    **params: Any,
):
    """``POST /datasets/{id}/records`` without checking the status; the response."""
    body = text_or_bytes.encode() if isinstance(text_or_bytes, str) else text_or_bytes
    query = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items()}
    return client.post(
        f"/datasets/{dataset_id}/records",
        content=body,
        params=query,
        headers={"content-type": "text/csv", **(headers or {})},
    )


def create_key(client: TestClient, role: str, quota: float | None = None) -> str:
    """``POST /keys`` as the client's (admin) key; the new key's secret."""
    resp = client.post("/keys", json={"name": f"test {role}", "role": role, "epsilon_quota": quota})
    assert resp.status_code == 201, resp.text
    return resp.json()["key"]


def auth(key: str) -> dict[str, str]:
    """An ``Authorization`` header for ``key``."""
    return {"Authorization": f"Bearer {key}"}
