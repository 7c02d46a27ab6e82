"""Loads the readers' compiled kernels when imported (by the parsing fork server)."""

from __future__ import annotations

from app.ingest.kernels import load_ingest_kernels

load_ingest_kernels()
