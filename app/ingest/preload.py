"""Loads the compiled readers (numba, from their on-disk cache) by reading tiny inputs
once: imported by the parsing processes' fork server (:mod:`app.ingest.parse_process`)
before it forks any child, so that no upload pays it."""

from __future__ import annotations

import numpy as np

from app.ingest.csv_fast import scan_plain
from app.ingest.gtfs_fast import scan_entities
from app.ingest.h3_cells import cells

scan_plain(
    np.frombuffer(b"u,0,0,0,0\n", np.uint8), 0, 1, 1, 44, (0, 1, 2, 3, 4), 5, 1.0, False, False
)
scan_entities(np.frombuffer(b"\x12\x00", np.uint8), 0, 1)
cells(np.zeros(1), np.zeros(1), 0)
