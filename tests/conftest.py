"""Shared fixtures: every database test runs on SQLite and on a real Postgres.

Migrating a database costs 0.2-0.3 s, so each xdist worker migrates one template per
backend once and every test gets a copy of it: on SQLite the template file copied, on
Postgres a new schema built from the template's DDL (``pg_dump --schema-only``, its
schema name replaced) plus the template's few rows (Alembic's version). The templates
are made by the migrations themselves, so a copy is exactly what ``upgrade`` makes.
``postgres_url`` and ``sqlite_url`` stay fresh, empty databases (for tests of the
migrations themselves); ``db_url`` and everything built on it (``settings``, ``app``,
``client``) get a migrated copy.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import NullPool

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


@pytest.fixture(scope="session")
def postgres_admin(postgres_base_url: str) -> Iterator[Engine]:
    """One engine per worker for creating and dropping the tests' schemas (holding no
    connection between uses: the server's connections are shared with other runs)."""
    engine = create_engine(postgres_base_url, poolclass=NullPool)
    yield engine
    engine.dispose()


def _new_schema_url(base_url: str) -> tuple[str, str]:
    schema = "t_" + uuid.uuid4().hex[:16]
    url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False), schema


def _drop_schema(admin: Engine, schema: str) -> None:
    with admin.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def postgres_url(postgres_base_url: str, postgres_admin: Engine) -> Iterator[str]:
    """A fresh, empty schema on the real Postgres server (dropped afterwards)."""
    url, schema = _new_schema_url(postgres_base_url)
    with postgres_admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield url
    finally:
        _drop_schema(postgres_admin, schema)


class PostgresTemplate:
    """A schema migrated once, and the SQL that rebuilds it under another name."""

    def __init__(self, base_url: str, admin: Engine) -> None:
        self.base_url, self.admin = base_url, admin
        url, self.schema = _new_schema_url(base_url)
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{self.schema}"')
        upgrade(url)
        self.ddl = self._dump()
        with admin.connect() as conn:
            tables = conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": self.schema}
            ).scalars()
            self.filled = [
                t
                for t in tables
                if conn.exec_driver_sql(f'SELECT 1 FROM "{self.schema}"."{t}" LIMIT 1').first()
            ]

    def _dump(self) -> str | None:
        """The template's DDL, or None without a matching ``pg_dump`` (then each copy
        is migrated, as before)."""
        u = make_url(self.base_url)
        command = [
            "pg_dump", "--schema-only", "--no-owner", "--no-privileges",
            f"--schema={self.schema}", "-h", u.host or "127.0.0.1", "-p", str(u.port or 5432),
            "-U", u.username or "postgres", u.database or "postgres",
        ]  # fmt: skip
        env = {**os.environ, "PGPASSWORD": u.password or ""}
        try:
            out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        except (OSError, subprocess.CalledProcessError):
            return None
        lines = [
            line
            for line in out.stdout.splitlines()
            if not line.startswith("\\") and not line.startswith("CREATE SCHEMA")
        ]
        return "\n".join(lines)

    def copy(self) -> tuple[str, str]:
        url, schema = _new_schema_url(self.base_url)
        with self.admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
            if self.ddl is not None:
                # the driver's own cursor: no parameters, so no placeholder parsing
                conn.connection.dbapi_connection.cursor().execute(
                    self.ddl.replace(self.schema, schema)
                )
                for table in self.filled:
                    conn.exec_driver_sql(
                        f'INSERT INTO "{schema}"."{table}" SELECT * FROM "{self.schema}"."{table}"'
                    )
        if self.ddl is None:
            upgrade(url)
        return url, schema


@pytest.fixture(scope="session")
def postgres_template(postgres_base_url: str, postgres_admin: Engine) -> Iterator[PostgresTemplate]:
    template = PostgresTemplate(postgres_base_url, postgres_admin)
    yield template
    _drop_schema(postgres_admin, template.schema)


@pytest.fixture
def migrated_postgres_url(
    postgres_template: PostgresTemplate, postgres_admin: Engine
) -> Iterator[str]:
    """A schema at the newest revision, copied from the worker's template."""
    url, schema = postgres_template.copy()
    try:
        yield url
    finally:
        _drop_schema(postgres_admin, schema)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'dpgate.db'}"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "dpgate.db"
    upgrade(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:  # everything in the main file, none in the WAL
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture
def migrated_sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A database file at the newest revision, copied from the worker's template."""
    path = tmp_path / "dpgate.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest) -> str:
    """A database at the newest revision, on each backend in turn."""
    return request.getfixturevalue(f"migrated_{request.param}_url")


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
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        yield c


@pytest.fixture
def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}
