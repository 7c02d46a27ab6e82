"""What the tests of migrations on data share: the key and the dataset their stored rows
belong to, inserted as SQL (the models follow today's schema, not the revision's)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection


def seed_key_and_dataset(conn: Connection) -> None:
    """API key 1 and dataset 1, in columns every revision since 0009 has."""
    conn.execute(
        text(
            "insert into api_keys (id, name, role, key_hash, prefix, epsilon_spent, created_at)"
            " values (1, 'k', 'admin', 'h', 'p', 0, now());"
            "insert into datasets (id, name, value_bound, h3_resolution, timeslot_minutes,"
            " timezone, budget_per_user, max_epsilon_per_query, on_exhausted, epoch,"
            " created_at) values (1, 'd', 1, 8, 60, 'UTC', 1, 1, 'refuse', 1, now())"
        )
    )


def account_keys(conn: Connection) -> dict[str, bool]:
    """The foreign keys of ``budget_accounts``: name → validated."""
    rows = conn.execute(
        text(
            "SELECT conname, convalidated FROM pg_constraint WHERE contype = 'f' "
            "AND conrelid = 'budget_accounts'::regclass"
        )
    ).all()
    return {name: valid for name, valid in rows}


def account_rows(conn: Connection) -> list[tuple]:
    """Every budget account, in key order, its date and spend as text."""
    rows = conn.execute(
        text(
            "SELECT dataset_id, epoch, window_start::text, user_id, spent::text "
            "FROM budget_accounts ORDER BY 1, 2, 3, 4"
        )
    ).all()
    return [tuple(r) for r in rows]
