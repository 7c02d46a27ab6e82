"""Synthetic occupancies and data sets from the seed papers (docs/math.md §7).

* :mod:`app.synth.itms` — the ITMS-like single grid of 002 §IV (counts matching
  every published fact exactly), projected-normal speeds, sample and user scaling;
* :mod:`app.synth.heavy_hitters` — 004 §VI-A2's heavy-hitter multi-grid occupancy;
* :mod:`app.synth.bounding` — 003 §IV-A's geometric and extreme collections and
  their uniform and truncated-normal value laws;
* :mod:`app.synth.city` — a synthetic ITMS-like city as raw
  ``user_id,timestamp,lat,lon,value`` records on H3 cells and hours, ingestible
  like real data (the demo's default data set).

Generators here take a seeded numpy ``Generator`` from the caller (experiments,
tests, benchmarks create it) so every draw is reproducible; nothing in this
package creates its own source of randomness.
"""
