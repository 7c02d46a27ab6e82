"""A query's fingerprint is the SHA-256 of one fixed JSON text: answers stored under it are
found again only while it stays the same, so the direct form must equal ``json.dumps``'."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

import pytest

from app.answers.epsilon import EpsilonAmount, parse_epsilon
from app.queries.service import fingerprint


def _reference(statistic: str, mechanism: str, eps: EpsilonAmount, options: dict[str, Any]) -> str:
    key = {
        "s": statistic,
        "m": mechanism,
        "e": str(eps.charged),
        "o": dict(sorted(options.items())),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


EPSILONS = [parse_epsilon(e) for e in (1e-6, 0.001234567, 0.5, 1, 10, 123456.789)] + [
    EpsilonAmount(Decimal("1E-7"), 1e-7),
    EpsilonAmount(Decimal("-0"), 0.0),
]


@pytest.mark.parametrize("eps", EPSILONS, ids=str)
@pytest.mark.parametrize("mechanism", ["auto", "clip", "user_window", 'a"b\\', "é\u2028\x00"])
def test_the_direct_text_is_json_dumps(eps: EpsilonAmount, mechanism: str) -> None:
    for statistic in ("mean", "variance", "user_mean"):
        assert fingerprint(statistic, mechanism, eps, {}) == _reference(
            statistic, mechanism, eps, {}
        )
        options = {"k": 3, "gamma": 0.5, "plan": "r1", "rule": "ci"}
        assert fingerprint(statistic, mechanism, eps, options) == _reference(
            statistic, mechanism, eps, options
        )


def test_a_stored_fingerprint_is_unchanged() -> None:
    """Fixed for good: the fingerprint of an answer stored before this form was written."""
    eps = EpsilonAmount(Decimal("0.500000000000"), 0.5)
    text = '{"e": "0.500000000000", "m": "clip", "o": {}, "s": "mean"}'
    assert fingerprint("mean", "clip", eps, {}) == hashlib.sha256(text.encode()).hexdigest()
