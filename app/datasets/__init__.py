"""Datasets, ingestion of raw records, and grids with their public occupancy."""
