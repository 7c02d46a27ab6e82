"""The Alembic revisions create exactly the models' schema."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.db.engine import make_engine
from app.db.migrate import upgrade
from migrations.models import Base, include_name


def test_migrations_match_models(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            opts = {"compare_type": True, "include_name": include_name}
            ctx = MigrationContext.configure(conn, opts=opts)
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


def _records_schema(conn) -> tuple[list[str], dict[str, str]]:
    from sqlalchemy import text

    columns = conn.execute(
        text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'records' "
            "AND table_schema = current_schema() ORDER BY column_name"
        )
    ).scalars()
    indexes = conn.execute(
        text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'records' "
             "AND schemaname = current_schema()")
    ).all()  # fmt: skip
    return list(columns), {name: d.split(" USING ")[1] for name, d in indexes}


def test_records_key_migrates_stored_records(postgres_url: str) -> None:
    """0010 keeps every stored record, makes ``(dataset_id, user_id, ts)`` the only index
    (the duplicate rule: a user's repeated timestamp), and an upload on the migrated data
    detects duplicates and rebuilds the grid as the old path would; down and up again."""
    import h3
    import numpy as np
    import pytest
    from alembic import command
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    from app.db.engine import make_sessionmaker
    from app.db.migrate import alembic_config
    from app.ingest.csv_records import ColumnMap
    from app.uploads.service import UploadOptions, upload_records

    lat, lon = 30.2672, -97.7431
    cell = h3.latlng_to_cell(lat, lon, 8)
    command.upgrade(alembic_config(postgres_url), "0009")
    engine = make_engine(postgres_url)
    stored = [(1, "10:05", 3.0), (1, "10:20", 4.0), (2, "10:10", 5.0)]  # (user, time, value)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "insert into datasets (id, name, value_bound, h3_resolution, timeslot_minutes,"
                    " timezone, budget_per_user, max_epsilon_per_query, on_exhausted, epoch,"
                    " created_at) values (1, 'd', 10, 8, 60, 'UTC', 1, 1, 'refuse', 1, now())"
                )
            )
            conn.execute(
                text(
                    "insert into dataset_users (id, dataset_id, user_hash) values (1, 1, :a), "
                    "(2, 1, :b)"
                ),
                {"a": _hash("x"), "b": _hash("y")},
            )
            conn.execute(
                text(
                    "insert into grids (id, public_id, dataset_id, h3_cell, slot_start, n_users,"
                    " n_records, max_user_records, version) values (1, 'g1', 1, :c,"
                    " '2016-11-25 10:00+00', 2, 3, 2, 1)"
                ),
                {"c": cell},
            )
            conn.execute(
                text(
                    "insert into grid_snapshots (grid_id, version, user_ids, counts, values)"
                    " values (1, 1, :u, :n, :v)"
                ),
                {
                    "u": np.array([1, 2], "<i8").tobytes(),
                    "n": np.array([2, 1], "<i8").tobytes(),
                    "v": np.array([3.0, 4.0, 5.0], "<f8").tobytes(),
                },
            )
            for table, last in (("dataset_users", 2), ("grids", 1), ("datasets", 1)):
                conn.execute(
                    text(f"select setval(pg_get_serial_sequence('{table}', 'id'), {last})")
                )
            for user, hhmm, value in stored:
                conn.execute(
                    text(
                        "insert into records (dataset_id, grid_id, user_id, ts, value) values"
                        " (1, 1, :u, :t, :v)"
                    ),
                    {"u": user, "t": f"2016-11-25 {hhmm}+00", "v": value},
                )
        upgrade(postgres_url)
        with engine.connect() as conn:
            columns, indexes = _records_schema(conn)
            assert columns == ["dataset_id", "grid_id", "ts", "user_id", "value"]
            assert indexes == {"pk_records": "btree (dataset_id, user_id, ts)"}
            assert conn.execute(
                text("select user_id, to_char(ts at time zone 'UTC', 'HH24:MI'), value "
                     "from records order by user_id, ts")
            ).all() == stored  # fmt: skip
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(
                text(
                    "insert into records (dataset_id, grid_id, user_id, ts, value) values"
                    " (1, 1, 1, '2016-11-25 10:05+00', 9)"
                )
            )

        # an upload: a duplicate, a row between stored ones (the grid is read back), a new user
        body = (
            "user_id,timestamp,lat,lon,value\n"
            f"x,2016-11-25T10:05:00Z,{lat},{lon},9\n"
            f"x,2016-11-25T10:15:00Z,{lat},{lon},6\n"
            f"z,2016-11-25T10:30:00Z,{lat},{lon},7\n"
        )
        sessions = make_sessionmaker(engine)
        options = UploadOptions(columns=ColumnMap(lat="lat", lon="lon", value="value"))
        with sessions.begin() as session:
            answer, _ = upload_records(session, 1, [body.encode()], options, hash_secret=SECRET)
        assert (answer["accepted"], answer["duplicates"], answer["grids_updated"]) == (2, 1, 1)
        with engine.connect() as conn:
            grid = conn.execute(
                text("select n_users, n_records, max_user_records, version from grids")
            ).one()
            snap = conn.execute(
                text("select version, user_ids, counts, values from grid_snapshots")
            ).one()
            new_user = conn.execute(
                text("select id from dataset_users where user_hash = :h"), {"h": _hash("z")}
            ).scalar_one()
        assert tuple(grid) == (3, 5, 3, 2) and snap[0] == 2
        assert np.frombuffer(snap[1], "<i8").tolist() == [1, 2, new_user]
        assert np.frombuffer(snap[2], "<i8").tolist() == [3, 1, 1]
        assert np.frombuffer(snap[3], "<f8").tolist() == [3.0, 6.0, 4.0, 5.0, 7.0]

        command.downgrade(alembic_config(postgres_url), "0009")
        with engine.connect() as conn:
            columns, indexes = _records_schema(conn)
            assert "id" in columns
            assert indexes == {
                "pk_records": "btree (id)",
                "uq_records_dataset_id": "btree (dataset_id, user_id, ts)",
                "ix_records_grid_user_ts": "btree (grid_id, user_id, ts)",
            }
            ids = conn.execute(text("select id from records")).scalars().all()
            assert sorted(ids) == list(range(1, 6))
        with engine.begin() as conn:  # the sequence goes on after the numbered rows
            conn.execute(
                text(
                    "insert into records (dataset_id, grid_id, user_id, ts, value) values"
                    " (1, 1, 1, '2016-11-25 10:59+00', 1)"
                )
            )
        upgrade(postgres_url)
        with engine.connect() as conn:
            assert conn.execute(text("select count(*) from records")).scalar_one() == 6
    finally:
        engine.dispose()


SECRET = b"migration-test-secret"


def _hash(user: str) -> str:
    from app.uploads.repository import hash_user

    return hash_user(SECRET, user)
