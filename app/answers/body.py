"""The API.md statistic answer of one release (``StatisticAnswer``, built field by field)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from app import core
from app.answers.epsilon import EpsilonAmount
from app.datasets.grid_store import GridVersion


def answer_body(
    grid: GridVersion,
    statistic: str,
    requested: str,
    eps: EpsilonAmount,
    options: dict[str, Any],
    release: core.Release,
    epoch: int,
    *,
    privacy_unit: str,
) -> dict[str, Any]:
    """The API.md statistic answer for ``release`` (its own epsilon share is reported);
    ``privacy_unit`` is the dataset's (``app.datasets.windows.privacy_unit``)."""
    return {
        "query_id": uuid.uuid4().hex,
        "grid_id": grid.public_id,
        "statistic": statistic,
        "mechanism": release.mechanism,
        "requested_mechanism": requested,
        "epsilon": float(release.epsilon) if release.epsilon < eps.used else float(eps.charged),
        "estimate": float(release.estimate),
        "sensitivity": float(release.sensitivity),
        "noise_scale": float(release.noise_scale),
        "worst_case_bias": _opt_float(release.worst_case_bias),
        "worst_case_error": _opt_float(release.worst_case_error),
        "ci95": None if release.ci95 is None else [float(v) for v in release.ci95],
        "ci95_note": release.ci95_note,
        "n_users": len(release.kept),
        "n_users_charged": int(np.count_nonzero(release.kept)),
        "privacy_unit": privacy_unit,
        "cached": False,
        "epoch": epoch,
        "options": options,
        "details": _jsonable(release.details),
    }


def _opt_float(x: float | None) -> float | None:
    return None if x is None else float(x)


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _jsonable(details: Mapping[str, Any]) -> dict[str, Any]:
    """``details`` as JSON values: numpy scalars and arrays become Python ones. Plain
    scalars (most details) are taken as they are; anything else goes through orjson."""
    if all(type(v) in _PLAIN for v in details.values()):
        return dict(details)
    return orjson.loads(orjson.dumps(dict(details), default=lambda o: getattr(o, "tolist", str)()))
