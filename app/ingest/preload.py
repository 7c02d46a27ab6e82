"""Loads the compiled kernels (:mod:`app.compiled`) when imported: the parsing processes'
fork server (:mod:`app.ingest.parse_process`) imports it before it forks any child, so
that no upload pays it."""

from __future__ import annotations

from app.compiled import load_compiled_kernels

load_compiled_kernels()
