"""The ledger's SQL that lives in the database: the query commit function (Postgres).

``commit_query.sql`` is the current function (migration 0009: budget windows);
``commit_query_0003.sql`` is the first version, frozen for migrations 0003-0004.
"""

from __future__ import annotations

from importlib.resources import files

#: The function's signature, as ``ALTER``/``DROP FUNCTION`` name it.
COMMIT_QUERY_SIGNATURE = (
    "dpgate_commit_query(integer, integer, date, integer, integer, varchar, integer[], "
    "numeric, numeric, integer, boolean, varchar, varchar, varchar, json, json)"
)
#: The first version's signature (migrations 0003-0004; dropped by 0009).
COMMIT_QUERY_0003_SIGNATURE = (
    "dpgate_commit_query(integer, integer, integer, integer, varchar, integer[], numeric, "
    "numeric, integer, boolean, varchar, varchar, varchar, json, json)"
)


def _sql(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


def commit_query_sql() -> str:
    """``CREATE FUNCTION dpgate_commit_query ...`` (``commit_query.sql``)."""
    return _sql("commit_query.sql")


def commit_query_0003_sql() -> str:
    """The function as migration 0003 created it (``commit_query_0003.sql``, frozen)."""
    return _sql("commit_query_0003.sql")
