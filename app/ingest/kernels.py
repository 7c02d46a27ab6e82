"""The readers' compiled (numba) kernels, loaded by running each on a tiny input: from
their on-disk cache (``__pycache__``), or compiled there on a fresh install (tens of
seconds, once). A serving process does it before it answers (``app.main``) and the
parsing processes' fork server before it forks (:mod:`app.ingest.preload`), so that no
upload pays a compile."""

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
