"""``X-Request-ID``: taken when valid, made otherwise, echoed, and on the request's log lines."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.observability.logs import JsonFormatter, RequestIdFilter, TextFormatter
from tests.conftest import ADMIN_KEY

MADE = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """What the server's handler writes (JSON), for the length of a test."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter())
    root, access = logging.getLogger(), logging.getLogger("dpgate.access")
    old_level = access.level
    root.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        access.setLevel(old_level)


def test_ids_are_echoed_validated_or_made(pg_client: TestClient) -> None:
    given = "req-42.a:b_C"
    assert (
        pg_client.get("/datasets", headers={"X-Request-ID": given}).headers["x-request-id"] == given
    )
    for bad in ("", "has space", "x" * 129, "new\\nline", "é"):
        made = pg_client.get("/datasets", headers={"X-Request-ID": bad.encode("utf-8")})
        assert MADE.fullmatch(made.headers["x-request-id"]), (bad, made.headers)
    ids = {pg_client.get("/healthz").headers["x-request-id"] for _ in range(5)}
    assert len(ids) == 5 and all(MADE.fullmatch(i) for i in ids)
    # errors carry it too: 401, 404, 400, 405
    for resp in (
        pg_client.get("/datasets", headers={"Authorization": "Bearer nope"}),
        pg_client.get("/datasets/99"),
        pg_client.get("/datasets?bogus=1"),
        pg_client.put("/healthz"),
    ):
        assert resp.status_code >= 400 and MADE.fullmatch(resp.headers["x-request-id"])


def test_every_line_of_a_request_is_json_with_its_id(
    pg_settings: Settings, log_lines: io.StringIO
) -> None:
    app = create_app(pg_settings)

    @app.get("/boom")
    def boom() -> None:  # an error no handler expects: the answer of last resort
        logging.getLogger("dpgate.test").warning("about to fail")
        raise RuntimeError("boom")

    with TestClient(app, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        for i, path in enumerate(("/datasets", "/datasets/7", "/boom")):
            resp = client.get(path, headers={"X-Request-ID": f"t-{i}"})
            assert resp.headers["x-request-id"] == f"t-{i}", (path, resp.headers)
    assert resp.status_code == 500 and resp.json()["error"]["code"] == "internal"

    records = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    access = [r for r in records if r["logger"] == "dpgate.access"]
    assert [(r["request_id"], r["path"], r["status"]) for r in access] == [
        ("t-0", "/datasets", 200),
        ("t-1", "/datasets/7", 404),
        ("t-2", "/boom", 500),
    ]
    assert access[0]["route"] == "/datasets" and access[0]["duration_ms"] > 0
    during = [r for r in records if r["logger"] in ("dpgate.test", "dpgate.errors")]
    assert [r["message"] for r in during] == ["about to fail", "unhandled error"]
    assert all(r["request_id"] == "t-2" for r in during)
    assert "RuntimeError: boom" in during[1]["exception"]


def test_text_lines_carry_the_id_too() -> None:
    record = logging.LogRecord("dpgate.access", logging.INFO, "", 0, "GET / %d", (200,), None)
    record.request_id = "abc"
    line = TextFormatter().format(record)
    assert line.endswith("INFO dpgate.access [abc] GET / 200"), line
