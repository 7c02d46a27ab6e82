"""The readers' compiled (numba) kernels, loaded from their cache (or compiled once) by running
each on a tiny input: by a server before it answers and by the parsing fork server before it
forks."""

from __future__ import annotations

import numpy as np

from app.ingest.csv_fast import scan_plain
from app.ingest.gtfs_fast import scan_entities
from app.ingest.h3_cells import cells

__all__ = ["load_ingest_kernels"]


def load_ingest_kernels() -> None:
    """Run every reader's compiled kernel once, with the argument types uploads pass."""
    scan_plain(
        np.frombuffer(b"u,0,0,0,0\n", np.uint8), 0, 1, 1, 44, (0, 1, 2, 3, 4), 5, 1.0, False, False
    )
    scan_entities(np.frombuffer(b"\x12\x00", np.uint8), 0, 1)
    cells(np.zeros(1), np.zeros(1), 0)
