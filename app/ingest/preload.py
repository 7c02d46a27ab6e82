"""Loads the readers' compiled kernels (:mod:`app.ingest.kernels`) when imported: the
parsing processes' fork server (:mod:`app.ingest.parse_process`) imports it before it
forks any child, so that no upload pays it."""

from __future__ import annotations

from app.ingest.kernels import load_ingest_kernels

load_ingest_kernels()
