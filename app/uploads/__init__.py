"""Ingestion's writing side: an upload's pipeline (``service``), the mapping of parsed
batches to ids and the snapshots built at its end (``ingestor``), and its bulk SQL
(``repository``: binary ``COPY`` and array statements). Parsing is ``app.ingest``'s;
the grid store it writes to is ``app.datasets``'."""
