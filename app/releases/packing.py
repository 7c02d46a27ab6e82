"""A stored release's two large columns, ``grids`` and ``kept``, as zstd frames (migration
0013), compressed here instead of by Postgres.

Postgres compressed them itself (TOAST, lz4) inside the release's transaction: for a day
(243 MB of grids' JSON, 38 MB of kept sets) 2-3.5 s of the backend's CPU while the
request waited. zstd at level 1 (the ``zstandard`` bindings) takes ~0.2 s here and
gives half lz4's size (13 MB for the day's grids); the columns are then stored as they
come (``STORAGE EXTERNAL``), and a read moves 13 MB, not 243. Each frame records its
content size, so :func:`unpack` allocates once.
"""

from __future__ import annotations

import zstandard

__all__ = ["LEVEL", "pack", "unpack"]

#: zstd's fastest standard level: on the grids' JSON as small as level 3, and faster.
LEVEL = 1


def pack(data: bytes) -> bytes:
    """``data`` as one zstd frame (with its content size)."""
    return zstandard.ZstdCompressor(level=LEVEL).compress(data)


def unpack(blob: bytes) -> bytes:
    """The bytes :func:`pack` was given."""
    return zstandard.ZstdDecompressor().decompress(blob)
