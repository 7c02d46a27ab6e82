"""The demo's seeded synthetic city: the one module of ``app`` that creates a generator (repo
hooks check it); nothing the service reaches imports it."""

from __future__ import annotations

import numpy as np

from app.synth.city import CityConfig, records_csv, synthetic_city

__all__ = ["synthetic_city_csv"]


def synthetic_city_csv(seed: int = 0, config: CityConfig | None = None) -> str:
    """The synthetic ITMS-like city of :func:`app.synth.city.synthetic_city` as CSV text,
    drawn from ``numpy.random.default_rng(seed)``."""
    return records_csv(synthetic_city(np.random.default_rng(seed), config))
