"""A stored release's ``grids`` and ``kept`` packed by the app (zstd), stored as they come.

Postgres compressed both columns itself (TOAST, lz4 since 0011) inside the release's
transaction: for a day release (243 MB of grids' JSON, 38 MB of kept sets) 1.2 s of the
backend's CPU (``benchmarks/release_store.py``; 4-5 s inside a whole day release at a slow
time of the test machine). The app now writes each as one zstd frame at level 1
(``app.releases.packing``: half the stored size), and the columns are
``STORAGE EXTERNAL`` (out of line, never compressed again). Each row is packed here, and
unpacked on downgrade (back to ``EXTENDED``, compressed by Postgres as before). A zstd
frame starts with its magic number, which neither JSON text nor the kept sets' magic
line does, so a row already in the target form is left as it is. The format is written
out here, not imported, so that this revision does not change when the app does.

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Callable, Sequence

import zstandard
from alembic import op
from sqlalchemy import text

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("grids", "kept")


def _pack(value: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=1).compress(value)


def _unpack(value: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompress(value)


def _rewrite(convert: Callable[[bytes], bytes], packed: bool) -> None:
    conn = op.get_bind()
    ids = conn.execute(text("SELECT id FROM slot_releases ORDER BY id")).scalars().all()
    for rid in ids:  # one row at a time: a day release's columns are hundreds of MB
        row = conn.execute(
            text("SELECT grids, kept FROM slot_releases WHERE id = :i"), {"i": rid}
        ).one()
        values = {c: bytes(v) for c, v in zip(COLUMNS, row, strict=True)}
        todo = {c: convert(v) for c, v in values.items() if v.startswith(zstandard.FRAME_HEADER) != packed}
        if todo:
            sets = ", ".join(f"{c} = :{c}" for c in todo)
            conn.execute(text(f"UPDATE slot_releases SET {sets} WHERE id = :i"), {**todo, "i": rid})


def _storage(kind: str) -> None:
    op.execute(
        "ALTER TABLE slot_releases "
        + ", ".join(f"ALTER COLUMN {c} SET STORAGE {kind}" for c in COLUMNS)
    )


def upgrade() -> None:
    _storage("EXTERNAL")
    _rewrite(_pack, packed=True)


def downgrade() -> None:
    _storage("EXTENDED")
    _rewrite(_unpack, packed=False)
