"""The query pool connects exactly as SQLAlchemy's engine does for the same URL."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from app.db.liveness import conninfo_from_url


def test_conninfo_keeps_host_port_user_database_and_options() -> None:
    url = (
        "postgresql+psycopg://alice:s%40cret@db.example:6543/dpgate"
        "?options=-csearch_path%3Dbench_1&sslmode=require"
    )
    assert conninfo_to_dict(conninfo_from_url(url)) == {
        "host": "db.example",
        "port": "6543",
        "user": "alice",
        "password": "s@cret",
        "dbname": "dpgate",
        "options": "-csearch_path=bench_1",
        "sslmode": "require",
    }


def test_conninfo_refuses_a_url_of_another_database() -> None:
    with pytest.raises(ValueError, match="not a Postgres URL"):
        conninfo_from_url("mysql://root@localhost/dpgate")
