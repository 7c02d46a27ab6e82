"""SQL frozen as old revisions wrote it (``migrations/sql/``): a revision must keep
creating what it created then, whatever the application's SQL has become since."""

from __future__ import annotations

from importlib.resources import files

#: The first query commit function's signature (revisions 0003-0004; dropped by 0009).
COMMIT_QUERY_0003_SIGNATURE = (
    "dpgate_commit_query(integer, integer, integer, integer, varchar, integer[], numeric, "
    "numeric, integer, boolean, varchar, varchar, varchar, json, json)"
)


def commit_query_0003_sql() -> str:
    """The query commit function as revision 0003 created it."""
    return files("migrations").joinpath("sql", "commit_query_0003.sql").read_text("utf-8")


#: The query commit function's signature since revision 0009 (budget windows).
COMMIT_QUERY_0009_SIGNATURE = (
    "dpgate_commit_query(integer, integer, date, integer, integer, varchar, integer[], "
    "numeric, numeric, integer, boolean, varchar, varchar, varchar, json, json)"
)


def commit_query_0009_sql() -> str:
    """The query commit function as revision 0009 created it (budget windows)."""
    return files("migrations").joinpath("sql", "commit_query_0009.sql").read_text("utf-8")
