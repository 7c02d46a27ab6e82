"""Synthetic data for the demo and the tests (docs/math.md §7): a city of raw records
(``city``, the demo's data) and the ITMS-like grid's counts it starts from (``itms``). Every
draw comes from a seeded numpy ``Generator`` the caller hands in (``random_source``); the
papers' other workloads are the experiments' (``research/workloads.py``)."""
