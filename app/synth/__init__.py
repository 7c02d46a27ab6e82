"""Synthetic occupancies and data sets of the seed papers' experiments (docs/math.md §7): the
ITMS-like grid (``itms``), heavy hitters (``heavy_hitters``), the bounding collections
(``bounding``) and a city of raw records (``city``, the demo's data). Every draw comes from a
seeded numpy ``Generator`` the caller hands in (``random_source``)."""
