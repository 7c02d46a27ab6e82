"""Shared fixtures: every database test runs on SQLite and on a real Postgres."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from app.config import Settings
from app.db.migrate import upgrade
from app.main import create_app
from tests.postgres import postgres_target

ADMIN_KEY = "dpg_test_admin_key_0123456789"
DATABASES = [
    d.strip() for d in os.environ.get("DPGATE_TEST_DATABASES", "sqlite,postgres").split(",")
]


def pytest_report_header(config: pytest.Config) -> list[str]:
    if "postgres" not in DATABASES:
        return ["dpgate: Postgres tests DISABLED by DPGATE_TEST_DATABASES"]
    target = postgres_target()
    return [f"dpgate: Postgres tests run against {target.source}"]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if "postgres" in DATABASES:
        terminalreporter.write_line(
            f"dpgate: Postgres tests ran against {postgres_target().source}"
        )
    else:
        terminalreporter.write_line("dpgate: WARNING: Postgres tests were NOT run", red=True)


@pytest.fixture(scope="session")
def postgres_base_url() -> str:
    target = postgres_target()
    if target.url is None:
        pytest.fail(f"Postgres is required for these tests: {target.source}", pytrace=False)
    return target.url


def _new_schema_url(base_url: str) -> tuple[str, str]:
    schema = "t_" + uuid.uuid4().hex[:16]
    url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False), schema


@pytest.fixture
def postgres_url(postgres_base_url: str) -> Iterator[str]:
    """A fresh, empty schema on the real Postgres server (dropped afterwards)."""
    url, schema = _new_schema_url(postgres_base_url)
    admin = create_engine(postgres_base_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield url
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'dpgate.db'}"


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def settings(db_url: str, tmp_path) -> Settings:
    return Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        secret_key="test-secret",
        secret_file=tmp_path / "secret.key",
    )


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    upgrade(settings.database_url)
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        yield c


@pytest.fixture
def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}
