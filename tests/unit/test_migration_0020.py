"""Migration 0020 on data: ``budget_accounts`` loses its dataset's foreign key and keeps its
accounts; deleting a dataset still deletes them (a trigger). Down puts the key back, validated,
after deleting the accounts of datasets that are gone; the accounts' fillfactor goes 60 → 50
and back."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from app.db.engine import make_engine
from app.db.migrate import alembic_config, upgrade
from tests.unit.migration_support import account_keys, account_rows, seed_key_and_dataset

DATASET_FK = "fk_budget_accounts_dataset_id_datasets"


def _fillfactor(conn) -> list[str] | None:
    return conn.execute(
        text("SELECT reloptions FROM pg_class WHERE oid = 'budget_accounts'::regclass")
    ).scalar()


def _second_dataset(conn) -> None:
    conn.execute(
        text(
            "insert into datasets (id, name, value_bound, h3_resolution, timeslot_minutes,"
            " timezone, budget_per_user, max_epsilon_per_query, on_exhausted, epoch,"
            " created_at) values (2, 'e', 1, 8, 60, 'UTC', 1, 1, 'refuse', 1, now())"
        )
    )


def test_account_dataset_key_becomes_a_trigger_and_back(postgres_url: str) -> None:
    command.upgrade(alembic_config(postgres_url), "0019")
    engine = make_engine(postgres_url)
    try:
        with engine.begin() as conn:
            seed_key_and_dataset(conn)
            _second_dataset(conn)
            conn.execute(
                text(
                    "insert into budget_accounts (dataset_id, epoch, window_start, user_id, spent)"
                    " values (1, 1, '0001-01-01', 7, 0.5), (1, 1, '2024-03-01', 9, 0.25),"
                    " (2, 1, '0001-01-01', 7, 0.125)"
                )
            )
            before = account_rows(conn)
            assert account_keys(conn) == {DATASET_FK: True}
            assert _fillfactor(conn) == ["fillfactor=60"]
        upgrade(postgres_url)
        with engine.begin() as conn:
            assert account_rows(conn) == before
            assert account_keys(conn) == {}
            assert _fillfactor(conn) == ["fillfactor=50"]
        command.downgrade(alembic_config(postgres_url), "0019")
        with engine.begin() as conn:
            assert account_rows(conn) == before
            assert account_keys(conn) == {DATASET_FK: True}
            assert _fillfactor(conn) == ["fillfactor=60"]
        upgrade(postgres_url)
        with engine.begin() as conn:  # the trigger deletes a dataset's accounts, only its own
            conn.execute(text("DELETE FROM datasets WHERE id = 2"))
            assert account_rows(conn) == before[:2]
            conn.execute(  # an account of no dataset (written past the ledger)
                text(
                    "insert into budget_accounts (dataset_id, epoch, window_start, user_id, spent)"
                    " values (3, 1, '0001-01-01', 7, 0)"
                )
            )
        command.downgrade(alembic_config(postgres_url), "0019")
        with engine.begin() as conn:
            assert account_rows(conn) == before[:2]
            assert account_keys(conn) == {DATASET_FK: True}
            conn.execute(text("DELETE FROM datasets WHERE id = 1"))
            assert account_rows(conn) == []
    finally:
        engine.dispose()
