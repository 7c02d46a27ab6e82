"""Database plumbing: declarative base and column types (``base``), engine and sessions
(``engine``), which database it is (``dialect``), units of work (``unit``), the query
hot path's asyncio pool (``pg_async``) and migrations (``migrate``)."""
