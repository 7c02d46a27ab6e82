"""Shared fixtures: every database test runs on a real Postgres (``tests.postgres``
says which: ``DPGATE_TEST_POSTGRES_URL``, else a throwaway embedded one).

Each test gets a schema of its own. Migrating one costs 0.2-0.3 s, so each xdist
worker migrates one template once and every test gets a copy of it: a new schema
built from the template's DDL (``pg_dump --schema-only``, its schema name replaced)
plus the template's few rows (Alembic's version). The template is made by the
migrations themselves, so a copy is exactly what ``upgrade`` makes. ``postgres_url``
stays a fresh, empty schema (for tests of the migrations themselves and for servers
that migrate on start); ``db_url`` and everything built on it (``settings``, ``app``,
``client``) get a migrated copy. The copies are made ahead, and dropped after their test,
by the worker's threads (``tests.schema_pool``).
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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
from tests import kernels_once
from tests.postgres import postgres_target
from tests.schema_pool import SchemaPool

ADMIN_KEY = "dpg_test_admin_key_0123456789"


def pytest_configure(config: pytest.Config) -> None:
    kernels_once.start(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    kernels_once.finish(config)


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels() -> None:
    """The kernels compiled once for all workers, when the controlling process does it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        kernels_once.wait_for_them()


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"dpgate: database tests run against {postgres_target().source}"]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    terminalreporter.write_line(f"dpgate: database tests ran against {postgres_target().source}")


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
    _vacuum_catalogs(engine)
    yield engine
    engine.dispose()


#: The catalogs each test's schema (created, then dropped) leaves dead rows in.
_SCHEMA_CATALOGS = (
    "pg_attribute", "pg_class", "pg_depend", "pg_type", "pg_constraint", "pg_index",
    "pg_attrdef", "pg_sequence", "pg_trigger", "pg_proc", "pg_namespace", "pg_statistic",
)  # fmt: skip


def _vacuum_catalogs(engine: Engine) -> None:
    """Vacuum the catalogs a run's thousand schemas bloat: on a server without autovacuum
    they grow with every run (seen: pg_attribute at 640 MB, every schema copy slower). A
    role that may not vacuum them gets a warning, not an error; a run goes on either way."""
    tables = ", ".join(f"pg_catalog.{t}" for t in _SCHEMA_CATALOGS)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM {tables}")


def _new_schema_url(base_url: str) -> tuple[str, str]:
    schema = "t_" + uuid.uuid4().hex[:16]
    url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False), schema


def _drop_schema(admin: Engine, schema: str) -> None:
    with admin.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def new_schema(base_url: str, admin: Engine) -> Iterator[str]:
    """The URL of a fresh, empty schema on the test server (dropped afterwards)."""
    url, schema = _new_schema_url(base_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield url
    finally:
        _drop_schema(admin, schema)


@pytest.fixture
def postgres_url(
    postgres_base_url: str, postgres_admin: Engine, schema_pool: SchemaPool
) -> Iterator[str]:
    """A fresh, empty schema on the real Postgres server (dropped afterwards)."""
    url, schema = _new_schema_url(postgres_base_url)
    with postgres_admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    yield url
    schema_pool.drop_later(schema)


def _pg_dumps() -> list[str]:
    import pgserver

    bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
    return [str(bundled), "pg_dump"] if bundled.is_file() else ["pg_dump"]


#: A column option some servers set on every column they create (``pg_attver``): a copy's
#: server sets it again, so restating it (a statement per column) only slows each copy.
_SERVER_SET_OPTION = re.compile(r"ALTER TABLE ONLY \S+ ALTER COLUMN \S+ SET \(pg_attver=\d+\);$")


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
        """The template's DDL, or None without a ``pg_dump`` that can dump this server
        (then each copy is migrated, as before). The ``pgserver`` package's own
        ``pg_dump`` is tried first (it dumps its own server and older ones), then the
        one on the PATH."""
        u = make_url(self.base_url)
        host = u.host or u.query.get("host") or "127.0.0.1"
        args = [
            "--schema-only", "--no-owner", "--no-privileges", f"--schema={self.schema}",
            "-h", str(host), "-p", str(u.port or 5432), "-U", u.username or "postgres",
            u.database or "postgres",
        ]  # fmt: skip
        env = {**os.environ, "PGPASSWORD": u.password or ""}
        for pg_dump in _pg_dumps():
            try:
                out = subprocess.run(
                    [pg_dump, *args], capture_output=True, text=True, check=True, env=env
                )
            except (OSError, subprocess.CalledProcessError):
                continue
            lines = [
                line
                for line in out.stdout.splitlines()
                if not line.startswith("\\")
                and not line.startswith("CREATE SCHEMA")
                and not _SERVER_SET_OPTION.match(line)
            ]
            return "\n".join(lines)
        return None

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


@pytest.fixture(scope="session")
def schema_pool(
    postgres_template: PostgresTemplate, postgres_admin: Engine
) -> Iterator[SchemaPool]:
    """The worker's copies of the template, made and dropped beside its tests."""
    pool = SchemaPool(
        postgres_template.copy, lambda schema: _drop_schema(postgres_admin, schema), ready=2
    )
    yield pool
    pool.close()


@pytest.fixture
def migrated_postgres_url(schema_pool: SchemaPool) -> Iterator[str]:
    """A schema at the newest revision, copied from the worker's template."""
    url, schema = schema_pool.take()
    yield url
    schema_pool.drop_later(schema)


@pytest.fixture
def db_url(migrated_postgres_url: str) -> str:
    """A database (a schema of its own) at the newest revision."""
    return migrated_postgres_url


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


@contextmanager
def shared_client_on(
    schemas: SchemaPool, tmp_dir: Path, **overrides: object
) -> Iterator[TestClient]:
    """An admin's client of an app on a schema of its own, for several tests that only
    send requests the service must refuse without writing or charging anything (each
    test checks that itself, so one that writes still fails)."""
    url, schema = schemas.take()
    try:
        settings = Settings(
            database_url=url,
            admin_key=ADMIN_KEY,
            secret_key="test-secret",
            secret_file=tmp_dir / "secret.key",
            **overrides,  # type: ignore[arg-type]
        )
        with TestClient(create_app(settings), raise_server_exceptions=False) as c:
            c.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
            yield c
    finally:
        schemas.drop_later(schema)


@pytest.fixture(scope="module")
def shared_client(
    schema_pool: SchemaPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """``client``'s app, shared by a module's refusal tests (:func:`shared_client_on`)."""
    with shared_client_on(schema_pool, tmp_path_factory.mktemp("shared")) as c:
        yield c


@pytest.fixture
def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}
