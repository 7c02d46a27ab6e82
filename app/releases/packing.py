"""A stored release's two large columns, ``grids`` and ``kept``, as zstd frames (migration
0013), compressed here instead of by Postgres.

Postgres compressed them itself (TOAST, lz4) inside the release's transaction. For a day
(243 MB of grids' JSON, 38 MB of kept sets), ``python benchmarks/release_store.py``:
storing it cost the backend 1.19 s of CPU, 0.10 s packed here (the whole store 1.81 s ->
0.75 s, the JSON's encoding and zstd at level 1 included); 39.2 MB stored, 19.8 MB
packed; reading it back 0.42 s of the backend's CPU, 0.02 s. The columns are stored as
they come (``STORAGE EXTERNAL``). Each frame records its content size, so :func:`unpack`
allocates once.
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
