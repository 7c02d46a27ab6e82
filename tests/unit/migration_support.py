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
