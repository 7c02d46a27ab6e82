"""Plans of a whole-slot release from public occupancy only (no value is read).

A plan says, for every released grid, each user's kept count Γ (0: suppressed,
not charged). Each user pays the per-grid epsilon once per grid where Γ > 0, so
the largest cost is ``K·eps`` (Clip-User, docs/math.md). With a cost cap ``C``
the per-grid epsilon is searched among ``C/k`` (k = 1..G1): Clip-User's K
depends on epsilon through its error threshold E, so the largest ``C/k`` whose
plan has ``K <= k`` is taken (every candidate is checked, never assumed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from app import budget
from app.answers.epsilon import MIN_EPSILON, EpsilonAmount, parse_epsilon
from app.core.data.occupancy import Occupancy as CheckedOccupancy
from app.core.data.occupancy import unique_inverse, validate_occupancy
from app.core.noise.threads import in_parallel
from app.core.planning.clip_user import Suppressed, clip_user_suppressed
from app.kit.errors import InvalidRequest
from app.ledger.accounts import Accounts

#: Up to this many grids per user every candidate ``C/k`` is tried; beyond, a search.
FULL_SCAN_GRIDS = 12
#: Plans slower than this (a day) are made two at a time in the search.
PAIR_PLAN_SECONDS = 1.0


@dataclass(frozen=True)
class PlanOptions:
    clip_user: bool
    split: str = "half"
    error_target: float | None = None
    protect_min_error_grid: bool = False


@dataclass(frozen=True)
class Occupancy:
    """The released grids' (grid, user, count) pairs, grid by grid as in the snapshots."""

    grid: np.ndarray  # position of the grid in the release
    user: np.ndarray  # dataset_users.id
    count: np.ndarray
    bounds: np.ndarray  # pairs of grid i are bounds[i]:bounds[i+1]
    units: np.ndarray | None = None  # the users' budget subjects when users are their ranks

    def subjects_of(self, users: np.ndarray) -> np.ndarray:
        """The budget subjects of ``users`` (entries of :attr:`user`)."""
        return users if self.units is None else self.units[users]

    @classmethod
    def of(cls, user_ids: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> Occupancy:
        sizes = np.fromiter((u.size for u in user_ids), dtype=np.int64, count=len(user_ids))
        empty = [np.empty(0, dtype=np.int64)]
        return cls._owned(
            np.concatenate([*empty, *user_ids], dtype=np.int64),
            np.concatenate([*empty, *counts], dtype=np.int64),
            sizes,
        )

    @classmethod
    def of_columns(cls, user: np.ndarray, count: np.ndarray, sizes: np.ndarray) -> Occupancy:
        """Grids' pairs one after the other, ``sizes[i]`` of grid ``i`` (as in
        :class:`app.datasets.grid_batch.GridColumns`); the occupancy owns int64 copies."""
        if int(sizes.sum()) != user.size or user.size != count.size:
            raise ValueError("an occupancy's grids and pairs differ")
        user, count = np.array(user, dtype=np.int64), np.array(count, dtype=np.int64)
        return cls._owned(user, count, sizes)

    @classmethod
    def _owned(cls, user: np.ndarray, count: np.ndarray, sizes: np.ndarray) -> Occupancy:
        bounds = np.zeros(sizes.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        grid = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
        return cls(grid=grid, user=user, count=count, bounds=bounds)


@dataclass(frozen=True)
class SlotPlan:
    """``eps`` per grid, or with ``weights`` (per-cell ε, docs/math.md §6.10) the quantum:
    grid ``i`` is released at ``weights[i]·eps`` and a user pays ``eps`` times the sum of
    the weights of the grids keeping it; ``K`` is the largest such sum (no weights: the
    most grids a user is kept in), so every user pays at most ``K·eps``: a release's
    ``epsilon`` and ``K`` are these, each grid's statistics state their own epsilon."""

    eps: EpsilonAmount
    G1: int
    K: int
    kept: np.ndarray  # Γ per pair of the occupancy (0: not used, not charged)
    weights: np.ndarray | None = None  # per grid, whole quanta (None: 1 each)

    def caps(self, occ: Occupancy, i: int) -> np.ndarray:
        return self.kept[occ.bounds[i] : occ.bounds[i + 1]]

    def grid_eps(self, i: int) -> EpsilonAmount:
        """Grid ``i``'s epsilon: ``weights[i]`` quanta, exact (:func:`multiple`)."""
        return self.eps if self.weights is None else multiple(self.eps, int(self.weights[i]))

    def user_costs(self, occ: Occupancy) -> tuple[np.ndarray, np.ndarray]:
        """``(user ids, quanta charged)`` of every charged user: the grids keeping it, or
        with weights the sum of theirs."""
        if self.weights is None:
            users, n = distinct_counts(occ.user[self.kept > 0])
            return occ.subjects_of(users), n
        keep = self.kept > 0
        users, at = unique_inverse(occ.user[keep])
        paid = np.bincount(at, weights=self.weights[occ.grid[keep]], minlength=users.size)
        return occ.subjects_of(users), np.rint(paid).astype(np.int64)

    @property
    def max_cost(self) -> Decimal:
        return self.eps.charged * self.K

    def done(self) -> SlotPlan:
        return self

    @property
    def top_eps(self) -> Decimal:
        """The largest per-grid epsilon charged (a release's ``epsilon``)."""
        if self.weights is None or not self.weights.size:
            return self.eps.charged
        return self.eps.charged * int(self.weights.max())


def multiple(q: EpsilonAmount, w: int) -> EpsilonAmount:
    """``w`` quanta of ``q``: charged exactly ``w·q.charged`` (a Decimal), used the float
    at most that; ``w = 1`` is ``q`` itself."""
    if w == 1:
        return q
    charged = q.charged * w
    return EpsilonAmount(charged, budget.float_at_most(charged))


def grids_per_user(users: np.ndarray) -> int:
    return int(distinct_counts(users)[1].max()) if users.size else 0


def distinct_counts(users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(users, return_counts=True)``, by a count table where the ids are dense
    (a profile's units are ranks), else by a sort."""
    if users.size and users.dtype.kind in "iu":
        low = int(users.min())
        if int(users.max()) - low < 4 * users.size + 1024:
            counts = np.bincount(users - low)
            ids = np.flatnonzero(counts)
            return (ids + low).astype(users.dtype, copy=False), counts[ids]
    ids, counts = np.unique(users, return_counts=True)
    return ids, counts


def live_pairs(occ: Occupancy, excluded: np.ndarray | None) -> np.ndarray:
    """Which (grid, user) pairs of ``occ`` a plan may keep: all but the ``excluded`` ones
    (a mask over the pairs; ``None``: nobody left out)."""
    return np.ones(occ.user.size, dtype=bool) if excluded is None else ~excluded


@dataclass
class LivePairs:
    """What a plan reads of ``occ`` without the excluded pairs, whatever its epsilon: the
    live mask, their (grid, user, count) columns, ``G1`` and (once made) their checked
    Clip-User occupancy. One per plan maker: an epsilon search reads it many times."""

    live: np.ndarray
    g: np.ndarray
    u: np.ndarray
    c: np.ndarray
    G1: int
    checked: CheckedOccupancy | None = None

    @classmethod
    def of(cls, occ: Occupancy, excluded: np.ndarray | None) -> LivePairs:
        live = live_pairs(occ, excluded)
        if excluded is None:  # every pair: the occupancy's own columns, not copies
            g, u, c = occ.grid, occ.user, occ.count
        else:
            g, u, c = occ.grid[live], occ.user[live], occ.count[live]
        return cls(live, g, u, c, grids_per_user(u) if u.size else 0)


@dataclass(frozen=True)
class PlanDraft:
    """Clip-User's stages at ``eps`` with their ``K`` (final: the pseudo-user step that
    :meth:`done` adds removes nobody, docs/math.md §6.3)."""

    eps: EpsilonAmount
    K: int
    finish: Callable[[], SlotPlan]

    @property
    def max_cost(self) -> Decimal:
        return self.eps.charged * self.K

    def done(self) -> SlotPlan:
        plan = self.finish()
        if plan.K != self.K:
            raise RuntimeError("a finished plan's K differs from its stages'")
        return plan


#: A plan a search compares by its cost; a draft's kept counts are made if it is kept.
Planned = SlotPlan | PlanDraft


def draft_at(
    occ: Occupancy,
    excluded: np.ndarray | None,
    U: float,
    eps: EpsilonAmount,
    opts: PlanOptions,
    pairs: LivePairs | None = None,
) -> Planned:
    """The plan at ``eps`` with the ``excluded`` pairs left out (:func:`live_pairs`), as a
    :class:`PlanDraft` when Clip-User plans it (``.done()`` finishes it); ``pairs``:
    ``LivePairs.of(occ, excluded)``, kept between calls (made here if None)."""
    p = LivePairs.of(occ, excluded) if pairs is None else pairs
    if p.u.size == 0:
        return SlotPlan(eps, 0, 0, np.zeros(occ.user.size, dtype=np.int64))
    if not opts.clip_user:
        kept = np.zeros(occ.user.size, dtype=np.int64)
        kept[p.live] = p.c
        return SlotPlan(eps, p.G1, p.G1, kept)
    try:
        if p.checked is None:
            p.checked = validate_occupancy(p.g, p.u, p.c)
        stages = clip_user_suppressed(
            p.g,
            p.u,
            p.c,
            U,
            eps.used,
            error_target=opts.error_target,
            protect_min_error_grid=opts.protect_min_error_grid,
            split=opts.split,
            checked=p.checked,
        )
    except ValueError as exc:
        raise InvalidRequest(f"cannot plan this release: {exc}") from exc

    def finish(stages: Suppressed = stages) -> SlotPlan:
        kept = np.zeros(occ.user.size, dtype=np.int64)
        try:
            kept[p.live] = stages.kept()
        except ValueError as exc:
            raise InvalidRequest(f"cannot plan this release: {exc}") from exc
        return SlotPlan(eps, p.G1, grids_per_user(occ.user[kept > 0]), kept)

    return PlanDraft(eps, stages.K, finish)


def exact_amount(value: Decimal) -> EpsilonAmount:
    amount = parse_epsilon(float(value))
    return amount if amount.charged <= value else EpsilonAmount(value, float(value) * (1 - 1e-15))


def plan_for_cost(
    make: Callable[[EpsilonAmount], Planned],
    cost_cap: Decimal,
    max_epsilon: Decimal,
    G1: int,
) -> SlotPlan:
    """The plan with the largest per-grid epsilon of the form ``C/k`` whose users pay at
    most ``C``: a search over ``k`` for the smallest ``k`` with ``K(C/k) <= k``
    (``k = G1`` always qualifies; every ``k`` when ``G1`` is small), each candidate's
    plan computed and checked. The search follows the plans' ``K`` (an interpolation
    search, safeguarded by bisection). Only the plan returned is finished (``done``)."""

    def candidate(k: int) -> EpsilonAmount:
        value = min(budget.per_part(cost_cap, k), max_epsilon)
        if value < MIN_EPSILON:
            raise InvalidRequest(
                f"max_user_cost {cost_cap} is too small: a user in {G1} grids would get "
                f"a per-grid epsilon below {MIN_EPSILON}"
            )
        return exact_amount(value)

    G1 = max(G1, 1)
    if G1 <= FULL_SCAN_GRIDS:  # few candidates: try each, largest epsilon first
        for k in range(1, G1):
            plan = make(candidate(k))
            if plan.max_cost <= cost_cap:
                return plan.done()
        return make(candidate(G1)).done()
    started = time.perf_counter()
    best = make(candidate(G1))
    pairs = time.perf_counter() - started > PAIR_PLAN_SECONDS  # a second thread pays off
    # The bracket: k = fail_k does not fit (0: none probed), k = fit_k fits, each with the K
    # its plan had. Each round plans two k at once when a plan is slow (Clip-User's kernel
    # releases the GIL), else one:
    # where K, interpolated linearly between the bracket's ends, meets k (before any
    # failure: the K of the fitting plan, where C/G1's plan points), rounded up, and the k
    # below it (before any failure: an eighth above it). After two rounds that do not halve
    # the bracket, its midpoint. When "k fits" is monotone in k, as the binary search this
    # replaces assumed, the answer is the same; a day of the city takes 3 rounds instead of
    # 9 plans.
    fail_k, fail_K, fit_k, fit_K = 0, 0, G1, best.K
    slow = 0
    while fit_k - fail_k > 1:
        width = fit_k - fail_k
        if slow >= 2:
            k, slow = (fail_k + fit_k) // 2, 0
        elif fail_k == 0:
            k = fit_K if fit_K < fit_k else fit_k - 1
        else:
            num = fail_K * (fit_k - fail_k) - (fit_K - fail_K) * fail_k
            k = -(-num // ((fit_k - fit_K) + (fail_K - fail_k)))  # ceil
        k = min(max(k, fail_k + 1), fit_k - 1)
        other = k + max(1, k // 8) if fail_k == 0 else k - 1
        if not fail_k < other < fit_k:
            other = k + 1 if k + 1 < fit_k else k
        ks = sorted({k, other}) if pairs else [k]
        for k, plan in zip(ks, _plan_all(make, [candidate(j) for j in ks]), strict=True):
            if plan.max_cost <= cost_cap:
                if k < fit_k:
                    best, fit_k, fit_K = plan, k, plan.K
            elif k > fail_k:
                fail_k, fail_K = k, plan.K
        slow = slow + 1 if 2 * (fit_k - fail_k) > width else 0
    return best.done()


def _plan_all(
    make: Callable[[EpsilonAmount], Planned], amounts: list[EpsilonAmount]
) -> list[Planned]:
    """``make`` of each amount, the second one on the second thread (at most two)."""
    if len(amounts) == 1:
        return [make(amounts[0])]
    first, second = in_parallel(lambda: make(amounts[0]), lambda: make(amounts[1]))
    return [first, second]


def largest_affordable(
    make: Callable[[EpsilonAmount], SlotPlan],
    occ: Occupancy,
    plan: SlotPlan,
    accounts: Accounts,
    max_epsilon: Decimal,
    rounds: int = 6,
) -> float:
    """The largest per-grid epsilon at which every charged user could pay now (0 if
    none): each round lowers epsilon to ``min_u remaining_u / grids_u`` of the current
    plan and plans again, until the plan fits. A per-cell plan's weights are scaled down
    instead (its largest grid's epsilon at the largest quantum everyone could pay)."""
    if plan.weights is not None:
        users, quanta = plan.user_costs(occ)
        if users.size == 0:
            return float(plan.top_eps)
        fit = min(accounts.largest_epsilon(users, quanta), plan.eps.charged)
        return float(fit * int(plan.weights.max())) if fit >= MIN_EPSILON else 0.0
    for _ in range(rounds):
        users, grids = plan.user_costs(occ)
        if users.size == 0:
            return float(plan.eps.charged)
        fit = min(accounts.largest_epsilon(users, grids), max_epsilon, plan.eps.charged)
        if fit < MIN_EPSILON:
            return 0.0
        if fit == plan.eps.charged:
            return float(fit)
        plan = make(exact_amount(fit))
    return 0.0


def over_budget(occ: Occupancy, plan: SlotPlan, accounts: Accounts) -> np.ndarray:
    """Sorted ids of the users (budget subjects: ``app.ledger.accounts``) who cannot pay
    their cost in ``plan`` (the cap test, :func:`app.budget.over_cap_counts`, on each
    one's total for the release)."""
    users, grids = plan.user_costs(occ)
    return accounts.over_cap(users, grids, plan.eps.charged)
