"""Migration 0012: a stored release's kept sets rewritten from JSON to columns, on data;
read back per grid; down gives back the JSON text the app wrote; up again."""

from __future__ import annotations

import numpy as np
import orjson
from alembic import command
from sqlalchemy import text

from app.db.engine import make_engine, make_sessionmaker
from app.db.migrate import alembic_config, upgrade
from app.releases.kept_sets import MAGIC, KeptSets
from app.releases.packing import unpack
from app.releases.repository import ReleaseRepository
from tests.unit.migration_support import seed_key_and_dataset

# As the app wrote them (orjson, compact); a grid's users not in ascending id order.
KEPT = [
    {"g0": {"version": 3, "users": {"12": 2, "5": 1, "40": 7}}, "g1": {"version": 1, "users": {}}},
    {},
]


def _seed(conn) -> list[bytes]:
    seed_key_and_dataset(conn)
    texts = [orjson.dumps(k) for k in KEPT]
    for i, kept in enumerate(texts):
        conn.execute(
            text(
                "insert into slot_releases (public_id, dataset_id, epoch, slot_start,"
                " fingerprint, epsilon, head, n_grids, grids, kept, key_id, created_at)"
                " values (:p, 1, 1, now(), :p, 0.5, '{}', 0, '\\x5b5d', :k, 1, now())"
            ),
            {"p": f"r{i}", "k": kept},
        )
    return texts


def test_kept_sets_migrate_to_columns_and_back(postgres_url: str) -> None:
    command.upgrade(alembic_config(postgres_url), "0011")
    engine = make_engine(postgres_url)
    try:
        with engine.begin() as conn:
            texts = _seed(conn)
        upgrade(postgres_url, "0012")
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT kept FROM slot_releases ORDER BY id")).scalars()
            assert all(bytes(k).startswith(MAGIC) for k in stored)
        upgrade(postgres_url)  # read through today's model (packed since 0013)
        with make_sessionmaker(engine)() as session:
            repo = ReleaseRepository(session)
            r0, r1 = repo.by_public_id("r0", grids=False), repo.by_public_id("r1", grids=False)
            assert r0 is not None and r1 is not None
            got = r0.kept_caps("g0", np.array([5, 6, 12, 40]))
            assert got is not None and got[0] == 3 and got[1].tolist() == [1, 0, 2, 7]
            got = r0.kept_caps("g1", np.array([5]))
            assert got is not None and got[0] == 1 and got[1].tolist() == [0]
            assert r0.kept_caps("g2", np.array([5])) is None
            assert r1.kept_caps("g0", np.array([5])) is None
            assert KeptSets.from_bytes(unpack(r0.kept)).as_json() == {
                "g0": {"version": 3, "users": {12: 2, 5: 1, 40: 7}},
                "g1": {"version": 1, "users": {}},
            }
        command.downgrade(alembic_config(postgres_url), "0011")
        with engine.connect() as conn:
            back = conn.execute(text("SELECT kept FROM slot_releases ORDER BY id")).scalars()
            assert [bytes(k) for k in back] == texts
        upgrade(postgres_url)
    finally:
        engine.dispose()
