"""The cost-cap search of release plans (app.releases.planning) on made-up K(eps) curves."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from app.answers.epsilon import EpsilonAmount
from app.kit.errors import InvalidRequest
from app.releases.planning import PlanDraft, SlotPlan, plan_for_cost


def _maker(K_of_k: dict[int, int], cap: Decimal, calls: list[Decimal]):
    """A plan whose K at eps = floor(cap/k) is K_of_k[k]."""

    def make(eps: EpsilonAmount) -> SlotPlan:
        calls.append(eps.charged)
        k = min(K_of_k, key=lambda j: abs((cap / j) - eps.charged))
        return SlotPlan(eps, max(K_of_k), K_of_k[k], np.zeros(0, dtype=np.int64))

    return make


@pytest.mark.parametrize(
    "K_of_k",
    [
        {1: 5, 2: 4, 3: 3, 4: 3, 5: 3},  # fits from k = 3
        {1: 1, 2: 1, 3: 1},  # fits at once
        {1: 4, 2: 1, 3: 4, 4: 4},  # not monotone: k = 2 fits, k = 3 does not
        {k: 20 for k in range(1, 21)} | {17: 16},  # many grids: binary search, K <= k checked
    ],
)
def test_cost_cap_takes_the_largest_fitting_candidate(K_of_k: dict[int, int]) -> None:
    cap = Decimal("2")
    calls: list[Decimal] = []
    G1 = max(K_of_k)
    plan = plan_for_cost(_maker(K_of_k, cap, calls), cap, Decimal(10), G1)
    assert plan.max_cost <= cap  # never more than the cap, whatever the search did
    fitting = [k for k, K in K_of_k.items() if k >= K]
    if G1 <= 12:  # every candidate tried: the largest epsilon that fits
        assert plan.eps.charged == (cap / min(fitting)).quantize(Decimal("1e-12"), "ROUND_FLOOR")
    assert len(calls) <= G1


def test_cost_cap_respects_the_maximum_and_minimum_epsilon() -> None:
    calls: list[Decimal] = []
    plan = plan_for_cost(_maker({1: 1}, Decimal(50), calls), Decimal(50), Decimal(10), 1)
    assert plan.eps.charged == Decimal(10)
    with pytest.raises(InvalidRequest):
        plan_for_cost(_maker({1: 1}, Decimal("1e-9"), []), Decimal("1e-9"), Decimal(10), 1)


@pytest.mark.parametrize("answer", [3, 17, 30, 39, 40])
def test_cost_cap_search_starts_where_the_first_plan_points(answer: int) -> None:
    """On a monotone K(k) the search returns the smallest fitting k, as the plain binary
    search does, and when the plan at C/G1 points at it, with 3 plans."""
    G1 = 40
    K_of_k = {k: (answer if k >= answer else answer + 1) for k in range(1, G1 + 1)}
    cap = Decimal("2")
    calls: list[Decimal] = []
    plan = plan_for_cost(_maker(K_of_k, cap, calls), cap, Decimal(10), G1)
    want = (cap / answer).quantize(Decimal("1e-12"), "ROUND_FLOOR")
    assert (plan.K, plan.eps.charged) == (answer, want)
    assert len(calls) <= (4 if 1 < answer < G1 else 2 + 2 * G1.bit_length())
    K_of_k = {k: max(answer, G1 - k) if k < answer else answer for k in range(1, G1 + 1)}
    calls = []
    plan = plan_for_cost(_maker(K_of_k, cap, calls), cap, Decimal(10), G1)
    assert plan.max_cost <= cap
    assert len(calls) <= 1 + 2 + G1.bit_length()


@pytest.mark.parametrize("above", [1, 2, 5, 20])
def test_cost_cap_search_gallops_up_when_the_first_guess_does_not_fit(above: int) -> None:
    G1, guess = 60, 30
    answer = guess + above
    K_of_k = {k: (guess if k == G1 else (k if k >= answer else k + 1)) for k in range(1, G1 + 1)}
    cap = Decimal("2")
    calls: list[Decimal] = []
    plan = plan_for_cost(_maker(K_of_k, cap, calls), cap, Decimal(10), G1)
    assert answer == plan.K
    if above == 1:
        assert len(calls) <= 5  # two rounds of two plans
    assert len(calls) <= 3 + 2 * G1.bit_length()


@pytest.mark.parametrize("pairs", [False, True])
def test_cost_cap_search_finds_the_smallest_fitting_k_on_monotone_curves(
    pairs: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On random K(k) non-increasing in k (so that "k fits" is monotone), the search returns
    the smallest fitting k, in at most ~2 log2(G1) + 3 rounds of two plans; on the day of
    the city's curve (K 39 at G1 = 288, 46 at k = 39, 43 from k = 44 on) with 5 plans."""
    if pairs:  # plans made two at a time, as for a day
        monkeypatch.setattr("app.releases.planning.PAIR_PLAN_SECONDS", -1.0)
    rng = np.random.default_rng(11)
    cap = Decimal("2")
    for _ in range(200):
        G1 = int(rng.integers(13, 400))
        steps = rng.integers(0, 2, size=G1) * rng.integers(0, 4, size=G1)
        K = np.maximum(1, rng.integers(1, G1 + 1) - np.cumsum(steps))  # non-increasing
        K_of_k = {k: int(min(K[k - 1], G1)) for k in range(1, G1 + 1)}
        calls: list[Decimal] = []
        plan = plan_for_cost(_maker(K_of_k, cap, calls), cap, Decimal(10), G1)
        smallest = min(k for k, v in K_of_k.items() if v <= k)
        assert (plan.K, len(calls) <= 4 * G1.bit_length() + 7) == (K_of_k[smallest], True)
        assert plan.eps.charged == (cap / smallest).quantize(Decimal("1e-12"), "ROUND_FLOOR")
    city = {k: (39 if k > 60 else max(43, 46 - (3 * (k - 39)) // 5) if k >= 39 else 46)
            for k in range(1, 289)}  # fmt: skip
    calls = []
    plan = plan_for_cost(_maker(city, cap, calls), cap, Decimal(10), 288)
    assert plan.eps.charged == (cap / 44).quantize(Decimal("1e-12"), "ROUND_FLOOR")
    assert len(calls) <= 5


@pytest.mark.parametrize("G1", [5, 40])
def test_cost_cap_search_finishes_only_the_plan_it_returns(G1: int) -> None:
    """Drafts are compared by their stages' K; one is finished, the one returned."""
    cap = Decimal("2")
    K_of_k = {k: max(3, G1 - k) for k in range(1, G1 + 1)}
    finished: list[Decimal] = []
    make_plan = _maker(K_of_k, cap, [])

    def draft(eps: EpsilonAmount) -> PlanDraft:
        plan = make_plan(eps)
        return PlanDraft(eps, plan.K, lambda: finished.append(eps.charged) or plan)

    plan = plan_for_cost(draft, cap, Decimal(10), G1)
    assert finished == [plan.eps.charged] and plan.max_cost <= cap
    with pytest.raises(RuntimeError):  # a finished plan must keep the draft's K
        PlanDraft(plan.eps, plan.K + 1, lambda: plan).done()
