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


def _commit_functions(conn) -> list[tuple[int, list[str] | None]]:
    from sqlalchemy import text

    return conn.execute(
        text(
            "SELECT pronargs, proconfig FROM pg_proc WHERE proname = 'dpgate_commit_query'"
            " AND pronamespace = current_schema()::regnamespace"
        )
    ).all()


def test_budget_windows_migrate_down_and_up_and_refuse_to_drop_windows(postgres_url: str) -> None:
    """0009 swaps the commit function for the one taking the window (still with
    ``enable_seqscan = off``) and back; it refuses to go down while windowed accounts exist."""
    import pytest
    from alembic import command
    from sqlalchemy import text

    from app.db.migrate import alembic_config

    upgrade(postgres_url)
    engine = make_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert _commit_functions(conn) == [(16, ["enable_seqscan=off"])]
        command.downgrade(alembic_config(postgres_url), "0008")
        with engine.connect() as conn:
            assert _commit_functions(conn) == [(15, ["enable_seqscan=off"])]
        upgrade(postgres_url)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "insert into datasets (id, name, value_bound, h3_resolution,"
                    " timeslot_minutes, timezone, budget_per_user, max_epsilon_per_query,"
                    " on_exhausted, epoch, created_at, budget_window)"
                    " values (1, 'd', 1, 8, 60, 'UTC', 1, 1, 'refuse', 1, now(), 'day')"
                )
            )
            conn.execute(
                text("insert into dataset_users (id, dataset_id, user_hash) values (1, 1, 'h')")
            )
            conn.execute(
                text(
                    "insert into budget_accounts (dataset_id, epoch, window_start, user_id, spent)"
                    " values (1, 1, '2016-11-25', 1, 0)"
                )
            )
        with pytest.raises(RuntimeError, match="budget windows"):
            command.downgrade(alembic_config(postgres_url), "0008")
    finally:
        engine.dispose()
