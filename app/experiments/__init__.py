"""Experiments that reproduce the papers' figures (seeded randomness lives here only)."""
