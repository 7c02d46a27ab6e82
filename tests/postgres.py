"""Find a real Postgres for the test session, or start a throwaway one.

Order: ``DPGATE_TEST_POSTGRES_URL`` (default: the local server at 127.0.0.1:5432,
database ``test``); if that does not answer, a throwaway server from the
``pgserver`` pip package (a dependency of dpgate itself: ``app.db.embedded``). If
neither works the session **fails** — Postgres tests are never skipped silently.
"""

from __future__ import annotations

import atexit
import functools
import os
import tempfile
from dataclasses import dataclass

import psycopg
from sqlalchemy.engine import make_url

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class PostgresTarget:
    url: str | None
    source: str  # "external", "pgserver" or the reason it is missing


def _reachable(url: str) -> bool:
    u = make_url(url)
    try:
        with psycopg.connect(
            host=u.host or u.query.get("host"),
            port=u.port or 5432,
            user=u.username,
            password=u.password or None,
            dbname=u.database,
            connect_timeout=3,
        ) as conn:
            conn.execute("select 1")
        return True
    except psycopg.Error:
        return False


@functools.cache
def postgres_target() -> PostgresTarget:
    url = os.environ.get("DPGATE_TEST_POSTGRES_URL", DEFAULT_URL)
    if _reachable(url):
        return PostgresTarget(url, f"external server {make_url(url).render_as_string()}")
    try:
        import pgserver
    except ImportError:
        return PostgresTarget(
            None,
            f"no Postgres answers at {url} and the 'pgserver' package is not installed "
            "(pip install -e '.[dev]', or set DPGATE_TEST_POSTGRES_URL)",
        )
    pgdata = tempfile.mkdtemp(prefix="dpg-pg-")
    server = pgserver.get_server(pgdata, cleanup_mode="delete")
    atexit.register(server.cleanup)
    uri = make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    return PostgresTarget(
        uri.render_as_string(hide_password=False), f"throwaway pgserver in {pgdata}"
    )
