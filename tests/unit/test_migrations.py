"""The Alembic revisions create exactly the models' schema."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.db.engine import make_engine
from app.db.migrate import upgrade
from migrations.models import Base


def test_migrations_match_models(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(ctx, Base.metadata)
            tables = set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert diff == [], f"models and migrations differ; regenerate: {diff}"
    assert set(Base.metadata.tables) <= tables


def test_ledger_is_append_only_on_postgres(postgres_url: str) -> None:
    import pytest
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    upgrade(postgres_url)
    engine = make_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "insert into api_keys (id, name, role, key_hash, prefix, epsilon_spent,"
                    " created_at) values (1, 'k', 'admin', 'h', 'p', 0, now())"
                )
            )
            conn.execute(
                text(
                    "insert into datasets (id, name, value_bound, h3_resolution, timeslot_minutes,"
                    " timezone, budget_per_user, max_epsilon_per_query, on_exhausted, epoch,"
                    " created_at)"
                    " values (1, 'd', 1, 8, 60, 'UTC', 1, 1, 'refuse', 1, now())"
                )
            )
            conn.execute(
                text(
                    "insert into ledger_entries (dataset_id, epoch, key_id, kind, reference_id,"
                    " epsilon, n_users, users, created_at) values (1, 1, 1, 'query', 1, 0.1, 1,"
                    " '[1]', now())"
                )
            )
        for stmt in ("update ledger_entries set epsilon = 0", "delete from ledger_entries"):
            with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
                conn.execute(text(stmt))
    finally:
        engine.dispose()
