"""Validating a statistic's mechanism and options against the registry (``app.core``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app import core
from app.kit.errors import InvalidRequest


def parse_options(statistic: str, mechanism: str, raw: Mapping[str, str]) -> dict[str, Any]:
    """Validate the mechanism name and its options (unknown ones are 400)."""
    known = core.mechanisms(statistic)
    if mechanism not in known:
        raise InvalidRequest(
            f"unknown {statistic} mechanism {mechanism!r}; use one of {', '.join(sorted(known))}"
        )
    try:
        return core.validate_options(statistic, mechanism, dict(raw))
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
