"""Migration 0017 on data: the stored records move into their dataset's month partitions
(and a dataset without records gets its partition), an upload then writes beside them;
down puts every row back into one plain table; up again. Down refuses once retention
dropped records."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import text

from app.db.engine import make_engine
from app.db.migrate import alembic_config, upgrade
from tests.unit.migration_support import seed_key_and_dataset

ROWS = [  # (dataset, user, ts, grid, value): two months of dataset 1, none of dataset 2
    (1, 1, "2024-01-31 23:59:59+00", 1, 1.5),
    (1, 1, "2024-02-01 00:00:00+00", 1, 2.5),
    (1, 2, "2024-02-10 08:00:00+00", 1, 3.5),
]


def _records(conn) -> list[tuple]:
    rows = conn.execute(
        text("SELECT dataset_id, user_id, ts::text, grid_id, value FROM records ORDER BY 1, 2, 3")
    ).all()
    return [tuple(r) for r in rows]


def _partitions(conn) -> set[str]:
    return set(
        conn.execute(
            text(
                "SELECT c.relname FROM pg_class c WHERE c.relname LIKE 'records_d%' "
                "AND c.relkind IN ('r', 'p') AND c.relnamespace = current_schema()::regnamespace"
            )
        ).scalars()
    )


def test_records_move_into_partitions_and_back(postgres_url: str) -> None:
    command.upgrade(alembic_config(postgres_url), "0016")
    engine = make_engine(postgres_url)
    try:
        with engine.begin() as conn:
            seed_key_and_dataset(conn)
            conn.execute(
                text(
                    "insert into datasets (id, name, value_bound, h3_resolution, timeslot_minutes,"
                    " timezone, budget_per_user, max_epsilon_per_query, on_exhausted, epoch,"
                    " created_at) values (2, 'e', 1, 8, 60, 'UTC', 1, 1, 'refuse', 1, now())"
                )
            )
            for ds, user, ts, grid, value in ROWS:
                conn.execute(
                    text(
                        "insert into records (dataset_id, user_id, ts, grid_id, value)"
                        " values (:d, :u, :t, :g, :v)"
                    ),
                    {"d": ds, "u": user, "t": ts, "g": grid, "v": value},
                )
            conn.execute(text("SET TIME ZONE 'UTC'"))
            before = _records(conn)
        upgrade(postgres_url)
        with engine.begin() as conn:
            conn.execute(text("SET TIME ZONE 'UTC'"))
            assert _records(conn) == before
            assert _partitions(conn) == {
                "records_d1", "records_d1_m202401", "records_d1_m202402", "records_d2",
            }  # fmt: skip
            assert conn.execute(text("SELECT count(*) FROM records_d1_m202402")).scalar() == 2
            with pytest.raises(Exception, match="duplicate key"), conn.begin_nested():
                conn.execute(
                    text("insert into records (dataset_id, user_id, ts, grid_id, value)"
                         " values (1, 1, :t, 1, 9)"),
                    {"t": ROWS[0][2]},
                )  # fmt: skip
        command.downgrade(alembic_config(postgres_url), "0016")
        with engine.begin() as conn:
            conn.execute(text("SET TIME ZONE 'UTC'"))
            assert _records(conn) == before and _partitions(conn) == set()
        upgrade(postgres_url)
        with engine.begin() as conn:
            conn.execute(text("UPDATE datasets SET raw_kept_from = now() WHERE id = 2"))
        with pytest.raises(RuntimeError, match="dropped by retention"):
            command.downgrade(alembic_config(postgres_url), "0016")
    finally:
        engine.dispose()
