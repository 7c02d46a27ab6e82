"""What a refused query could still have: ``largest_epsilon`` of a ``budget_exhausted``.

Computed only on the refusal path, after the refusal, from the ledger and the key's
quota (never from values): the largest epsilon the same request could be answered
with now is the smallest of

* the users' limit: with ``on_exhausted = refuse``, the least budget left to any user
  of the grid (every one of them may be charged); with ``exclude``, the most left to
  any of them (exhausted users are dropped, so the request is answered while at least
  one user can pay; at that epsilon, only the users who can pay are in the estimate);
* what is left of the key's quota (if it has one);
* the dataset's ``max_epsilon_per_query``;

rounded down to the ledger's 12 decimals, and 0 below the smallest epsilon accepted.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
from sqlalchemy.orm import Session

from app import budget
from app.answers.epsilon import MIN_EPSILON
from app.keys.service import KeyIdentity
from app.kit.errors import BudgetExhausted
from app.ledger.repository import LedgerRepository
from app.ledger.rule import Verdict, refusal
from app.ledger.service import quota_left
from app.queries.repository import GridContext
from app.queries.store import QueryStore


def users_limit(ctx: GridContext, remaining: list[Decimal]) -> Decimal:
    """The largest epsilon the grid's users allow (see the module docstring)."""
    if not remaining:
        return ctx.budget_per_user
    return max(remaining) if ctx.on_exhausted == "exclude" else min(remaining)


def largest_epsilon(
    session: Session, ctx: GridContext, key_id: int, user_ids: np.ndarray
) -> Decimal:
    spent = LedgerRepository(session).spent(
        ctx.dataset_id, ctx.epoch, user_ids.tolist(), window=ctx.window
    )
    left = [budget.remaining(s, ctx.budget_per_user) for s in spent.values()]
    limits = [users_limit(ctx, left), ctx.max_epsilon_per_query]
    quota = quota_left(session, key_id)
    if quota is not None:
        limits.append(quota)
    return budget.largest_affordable(limits, MIN_EPSILON)


async def budget_refusal(
    store: QueryStore,
    ctx: GridContext,
    key: KeyIdentity,
    user_ids: np.ndarray,
    verdict: Verdict = Verdict.EXHAUSTED,
    *,
    over: int | None = None,
) -> BudgetExhausted:
    """:func:`app.ledger.rule.refusal` of a refused query, with its ``largest_epsilon``."""
    largest = await store.run(largest_epsilon, ctx, key.id, user_ids)
    return refusal(
        verdict,
        scope="this grid",
        over=over,
        key_name=key.name,
        largest_epsilon=budget.float_at_most(largest),
    )
