"""The operations tests (issue 26) run on Postgres only: an app on a migrated schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from tests.conftest import ADMIN_KEY, shared_client_on
from tests.schema_pool import SchemaPool

METRICS_TOKEN = "metrics-scraper-token-0123456789"


def make_settings(url: str, tmp_path: Path, **overrides: object) -> Settings:
    return Settings(
        database_url=url,
        admin_key=ADMIN_KEY,
        secret_key="test-secret",
        secret_file=tmp_path / "secret.key",
        **overrides,  # type: ignore[arg-type]
    )


@pytest.fixture
def pg_settings(migrated_postgres_url: str, tmp_path: Path) -> Settings:
    return make_settings(migrated_postgres_url, tmp_path, metrics_token=METRICS_TOKEN)


@pytest.fixture
def pg_client(pg_settings: Settings) -> Iterator[TestClient]:
    """An admin's client of an app on a fresh migrated Postgres schema."""
    with TestClient(create_app(pg_settings), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        yield client


@pytest.fixture(scope="module")
def shared_pg_client(
    schema_pool: SchemaPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """``pg_client``'s app, shared by a module's refusal tests (``shared_client_on``)."""
    with shared_client_on(
        schema_pool, tmp_path_factory.mktemp("shared"), metrics_token=METRICS_TOKEN
    ) as client:
        yield client
