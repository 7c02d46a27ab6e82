"""Database plumbing (Postgres only): declarative base and column types (``base``), the
embedded server used when no URL is set (``embedded``), engine and sessions (``engine``),
units of work (``unit``), the query hot path's asyncio pool (``pg_async``) and
migrations (``migrate``)."""
