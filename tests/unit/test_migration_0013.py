"""Migration 0013: a stored release's grids and kept sets packed (zstd) on data, the
columns stored as they come; served and read per grid as before; down gives back the
exact bytes, and Postgres's own compression; up again."""

from __future__ import annotations

import numpy as np
import orjson
from alembic import command
from sqlalchemy import text

from app.db.engine import make_engine, make_sessionmaker
from app.db.migrate import alembic_config, upgrade
from app.releases.kept_sets import KeptSets
from app.releases.packing import unpack
from app.releases.repository import ReleaseRepository
from tests.unit.migration_support import seed_key_and_dataset

GRIDS = [[{"grid_id": "g0", "mean": {"estimate": 1.5}}], []]
KEPT = [
    KeptSets(["g0"], [3], np.array([0, 2]), np.array([12, 5]), np.array([2, 1])).to_bytes(),
    KeptSets([], [], np.array([0]), np.array([], int), np.array([], int)).to_bytes(),
]


def _seed(conn) -> list[tuple[bytes, bytes]]:
    seed_key_and_dataset(conn)
    rows = [(orjson.dumps(g), k) for g, k in zip(GRIDS, KEPT, strict=True)]
    for i, (grids, kept) in enumerate(rows):
        conn.execute(
            text(
                "insert into slot_releases (public_id, dataset_id, epoch, slot_start,"
                " fingerprint, epsilon, head, n_grids, grids, kept, key_id, created_at)"
                " values (:p, 1, 1, now(), :p, 0.5, :h, :n, :g, :k, 1, now())"
            ),
            {"p": f"r{i}", "h": orjson.dumps({"release_id": f"r{i}", "grids": None}).decode(),
             "n": len(GRIDS[i]), "g": grids, "k": kept},
        )  # fmt: skip
    return rows


def _columns(conn) -> tuple[list[tuple[bytes, bytes]], set[str]]:
    rows = conn.execute(text("SELECT grids, kept FROM slot_releases ORDER BY id")).all()
    storage = conn.execute(
        text(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'slot_releases'::regclass"
            " AND attname IN ('grids', 'kept')"
        )
    ).scalars()
    return [(bytes(g), bytes(k)) for g, k in rows], set(storage)


def test_release_columns_are_packed_and_unpacked_on_data(postgres_url: str) -> None:
    command.upgrade(alembic_config(postgres_url), "0012")
    engine = make_engine(postgres_url)
    try:
        with engine.begin() as conn:
            before = _seed(conn)
        upgrade(postgres_url, "0013")
        with engine.connect() as conn:
            packed, storage = _columns(conn)
        assert storage == {"e"}  # EXTERNAL: out of line, not compressed again
        assert [(unpack(g), unpack(k)) for g, k in packed] == before
        upgrade(postgres_url)  # read through today's model
        with make_sessionmaker(engine)() as session:
            repo = ReleaseRepository(session)
            r0 = repo.by_public_id("r0")
            assert r0 is not None and r0.answer() == {"release_id": "r0", "grids": GRIDS[0]}
            got = r0.kept_caps("g0", np.array([5, 6, 12]))
            assert got is not None and got[0] == 3 and got[1].tolist() == [1, 0, 2]
        command.downgrade(alembic_config(postgres_url), "0012")
        with engine.connect() as conn:
            back, storage = _columns(conn)
        assert back == before and storage == {"x"}  # EXTENDED, as 0011 left it
        upgrade(postgres_url)
    finally:
        engine.dispose()
