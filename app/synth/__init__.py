"""Synthetic occupancies and data sets from the seed papers (SPEC §7).

Generators here take a seeded numpy ``Generator`` from the caller (experiments,
tests, benchmarks create it) so every draw is reproducible; nothing in this
package creates its own source of randomness.
"""
