"""``Idempotency-Key``: a retried request gets the first answer; a reused key with a
different request is refused (422 ``idempotency_conflict``)."""
