"""Migration 0019 on data: ``budget_accounts`` loses its ``user_id`` foreign key and keeps
its accounts and its dataset's key (deleting the dataset still deletes them); down puts the
key back, validated, and refuses while an account names no user."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import text

from app.db.engine import make_engine
from app.db.migrate import alembic_config
from tests.unit.migration_support import account_keys, account_rows, seed_key_and_dataset

USER_FK = "fk_budget_accounts_user_id_dataset_users"
DATASET_FK = "fk_budget_accounts_dataset_id_datasets"


def test_account_user_key_dropped_and_restored(postgres_url: str) -> None:
    command.upgrade(alembic_config(postgres_url), "0018")
    engine = make_engine(postgres_url)
    try:
        with engine.begin() as conn:
            seed_key_and_dataset(conn)
            conn.execute(
                text(
                    "insert into dataset_users (id, dataset_id, user_hash) "
                    "values (7, 1, 'a'), (9, 1, 'b');"
                    "insert into budget_accounts (dataset_id, epoch, window_start, user_id, spent)"
                    " values (1, 1, '0001-01-01', 7, 0.5), (1, 1, '2024-03-01', 9, 0.25)"
                )
            )
            before = account_rows(conn)
            assert account_keys(conn) == {DATASET_FK: True, USER_FK: True}
        command.upgrade(alembic_config(postgres_url), "0019")
        with engine.begin() as conn:
            assert account_rows(conn) == before
            assert account_keys(conn) == {DATASET_FK: True}
        command.downgrade(alembic_config(postgres_url), "0018")
        with engine.begin() as conn:
            assert account_rows(conn) == before
            assert account_keys(conn) == {DATASET_FK: True, USER_FK: True}
        command.upgrade(alembic_config(postgres_url), "0019")
        with engine.begin() as conn:  # an account naming no user: the key cannot come back
            conn.execute(
                text(
                    "insert into budget_accounts (dataset_id, epoch, window_start, user_id, spent)"
                    " values (1, 2, '0001-01-01', 8, 0)"
                )
            )
        with pytest.raises(Exception, match=USER_FK):
            command.downgrade(alembic_config(postgres_url), "0018")
        with engine.begin() as conn:
            assert account_keys(conn) == {DATASET_FK: True}
            conn.execute(text("DELETE FROM datasets WHERE id = 1"))
            assert account_rows(conn) == []
            assert conn.execute(text("SELECT count(*) FROM dataset_users")).scalar() == 0
    finally:
        engine.dispose()
