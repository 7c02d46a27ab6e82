"""Ingestion's writing side: the upload pipeline (``service``), ids and snapshots (``ingestor``),
bulk SQL (``repository``)."""
