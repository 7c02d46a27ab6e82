"""Migration 0011: stored releases split into a JSON head and JSON bytes, on data; up,
down and up again; lz4 where the server has it, the default compression where not."""

from __future__ import annotations

import orjson
import pytest
from alembic import command
from sqlalchemy import text

from app.db.engine import make_engine, make_sessionmaker
from app.db.migrate import alembic_config, upgrade
from app.releases.models import SlotRelease
from app.releases.repository import ReleaseRepository
from tests.security.private_pg import private_postgres
from tests.unit.migration_support import seed_key_and_dataset


def _grid(i: int) -> dict:
    stat = {"estimate": 0.1 * i + 1e-17, "ci95": [-1.5, 2.25e300], "privacy_unit": "user"}
    return {"grid_id": f"g{i}", "h3_cell": "882a100d2dfffff", "mean": stat, "variance": None}


# Answers as the app wrote them before 0011 (orjson, compact): today's fields, and an
# older release without slots/partition/h3_resolution whose text has "é" and "\\u2028".
ANSWERS = [
    {"release_id": "r1", "slot_start": "2024-03-05T08:00:00+01:00", "epsilon": 0.5,
     "max_user_cost": 1.0, "slots": 3, "partition": "adaptive", "h3_resolution": 8,
     "slot_minutes": 60, "grids": [_grid(i) for i in range(3)], "withheld_grids": 0,
     "cached": False, "epoch": 1},
    {"release_id": "r2", "slot_start": "2024-03-05T09:00:00+01:00", "epsilon": 0.25,
     "max_user_cost": 0.25, "grids": [], "skipped_grids": 2, "note": "é\u2028", "K": 1},
]  # fmt: skip
KEPT = [{"g0": {"version": 1, "users": {"1": 2, "2": 1}}}, {}]


def _seed(conn) -> list[tuple[str, str]]:
    seed_key_and_dataset(conn)
    texts = []
    for i, (answer, kept) in enumerate(zip(ANSWERS, KEPT, strict=True)):
        texts.append((orjson.dumps(answer).decode(), orjson.dumps(kept).decode()))
        conn.execute(
            text(
                "insert into slot_releases (public_id, dataset_id, epoch, slot_start,"
                " fingerprint, epsilon, answer, kept, key_id, created_at) values (:p, 1, 1,"
                " now(), :p, 0.5, cast(:a as json), cast(:k as json), 1, now() + :i * interval"
                " '1 second')"
            ),
            {"p": answer["release_id"], "a": texts[-1][0], "k": texts[-1][1], "i": i},
        )
    return texts


def _compression(conn) -> dict[str, str]:
    return dict(
        conn.execute(
            text(
                "SELECT attname, attcompression FROM pg_attribute WHERE attrelid ="
                " 'slot_releases'::regclass AND attname IN ('grids', 'kept')"
            )
        ).all()
    )


def _migrate_on_data(url: str) -> dict[str, str]:
    """0010 with stored releases → head: served, listed and stored as they were; down to
    0010 gives back the same text; up again. The columns' compression, after the first up."""
    command.upgrade(alembic_config(url), "0010")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            texts = _seed(conn)
        upgrade(url, "0011")
        with engine.connect() as conn:
            compression = _compression(conn)
            rows = conn.execute(
                text("SELECT n_grids, grids, kept FROM slot_releases ORDER BY id")
            ).all()
        for (n, grids, kept), answer, kept_sets in zip(rows, ANSWERS, KEPT, strict=True):
            assert n == len(answer["grids"]) and orjson.loads(kept) == kept_sets
            assert grids == orjson.dumps(answer["grids"])
        upgrade(url)  # read through today's model (packed since 0013)
        with make_sessionmaker(engine)() as session:
            repo = ReleaseRepository(session)
            for answer in ANSWERS:
                stored = repo.by_public_id(answer["release_id"])
                assert isinstance(stored, SlotRelease)
                assert stored.answer() == answer and list(stored.answer()) == list(answer)
            listed, more = repo.page(1, limit=10, offset=0)
        assert not more
        assert [(r.public_id, r.local_slot_start, r.slots, r.partition, r.max_user_cost,
                 r.n_grids, r.h3_resolution, r.slot_minutes) for r in listed] == [
            ("r2", ANSWERS[1]["slot_start"], None, None, 0.25, 0, None, None),
            ("r1", ANSWERS[0]["slot_start"], 3, "adaptive", 1.0, 3, 8, 60),
        ]  # fmt: skip

        command.downgrade(alembic_config(url), "0010")
        with engine.connect() as conn:
            back = conn.execute(
                text("SELECT answer::text, kept::text FROM slot_releases ORDER BY id")
            ).all()
        assert [tuple(r) for r in back] == texts
        upgrade(url)
        with make_sessionmaker(engine)() as session:
            stored = ReleaseRepository(session).by_public_id("r1")
            assert stored is not None and stored.answer() == ANSWERS[0]
    finally:
        engine.dispose()
    return compression


def test_releases_migrate_up_and_down_on_data(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    with engine.connect() as conn:
        lz4 = conn.execute(
            text("SELECT 'lz4' = ANY(enumvals) FROM pg_settings"
                 " WHERE name = 'default_toast_compression'")
        ).scalar_one()  # fmt: skip
    engine.dispose()
    expected = "l" if lz4 else ""
    assert _migrate_on_data(postgres_url) == {"grids": expected, "kept": expected}


@pytest.mark.slow  # starts a private embedded server (~3 s)
def test_without_lz4_the_migration_keeps_the_default_compression() -> None:
    """The embedded server (pgserver) is built without lz4."""
    with private_postgres() as pg:
        assert _migrate_on_data(pg.url) == {"grids": "", "kept": ""}
