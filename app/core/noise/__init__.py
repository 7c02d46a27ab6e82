"""Randomness on the release path: OpenDP's Laplace and noisy-max samplers (docs/math.md §9)."""
