"""A query's fingerprint is the SHA-256 of one fixed JSON text: answers stored under it are
found again only while it stays the same."""

from __future__ import annotations

import hashlib
from decimal import Decimal

from app.answers.epsilon import EpsilonAmount
from app.queries.service import fingerprint


def test_a_stored_fingerprint_is_unchanged() -> None:
    """Fixed for good: the fingerprint under which an answer is already stored."""
    eps = EpsilonAmount(Decimal("0.500000000000"), 0.5)
    text = '{"e": "0.500000000000", "m": "clip", "o": {}, "s": "mean"}'
    assert fingerprint("mean", "clip", eps, {}) == hashlib.sha256(text.encode()).hexdigest()
