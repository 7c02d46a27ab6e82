"""The Alembic revisions create exactly the models' schema, on SQLite and Postgres."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.db.models import Base


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
