"""The ledger's SQL that lives in the database: the query commit function (Postgres)."""

from __future__ import annotations

from importlib.resources import files

#: The function's signature, as ``ALTER``/``DROP FUNCTION`` name it.
COMMIT_QUERY_SIGNATURE = (
    "dpgate_commit_query(integer, integer, integer, integer, varchar, integer[], numeric, "
    "numeric, integer, boolean, varchar, varchar, varchar, json, json)"
)


def commit_query_sql() -> str:
    """``CREATE FUNCTION dpgate_commit_query ...`` (``commit_query.sql``)."""
    return files(__package__).joinpath("commit_query.sql").read_text(encoding="utf-8")
