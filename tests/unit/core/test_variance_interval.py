"""The window variance's honest interval (docs/math.md §11.6), checked against brute force.

:func:`variance_spread` must hold ``|σ² - V| <= spread`` on *every* dataset with at most
``A`` clipped users, where ``σ²`` is the population variance of all the grid's records
(capped ones included) and ``V`` the noiseless estimate at the window ``b``. Searched over
random datasets biased towards the extremes (values at 0, b and U, two-point users),
with caps. A copy that forgets what clipped users and capped records may hold (its
``[0, U]`` part) is caught by the same search.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.core.data.counts import prepare_counts
from app.core.data.grid import GridData
from app.core.mechanisms.mean_window import window_weights
from app.core.mechanisms.variance_window import (
    VARIANCE_WINDOW_FRACTIONS,
    mixture_variance_sensitivity,
    plan_variance_window,
    variance_spread,
)
from tests.unit.core.helpers import ZeroNoise

U = 30.0
#: Random datasets searched per case: the broken copy below is caught within two.
SEARCH = 1000


class _Pick(ZeroNoise):
    def __init__(self, j: int) -> None:
        super().__init__(0)
        self.j = j

    def noisy_max(self, scores, epsilon, *, sensitivity=1):  # type: ignore[no-untyped-def]
        return self.j


def _user_values(rng: np.random.Generator, m: int, b: float) -> list[float]:
    kind = rng.integers(4)
    if kind == 0:  # extremes
        return rng.choice([0.0, b, U], size=m).tolist()
    if kind == 1:  # one value
        return [float(rng.choice([0.0, b / 2, b, U]))] * m
    if kind == 2:  # inside the window
        return rng.uniform(0.0, b, size=m).tolist()
    return rng.uniform(0.0, U, size=m).tolist()


def _worst_ratio(counts: list[int], caps: list[int] | None, j: int, broken: bool) -> float:
    """max over random datasets of |σ² - V| / spread(A = users clipped)."""
    info = prepare_counts(counts, caps)
    draft = plan_variance_window(info, U, 1.0, 0.2)
    w = window_weights(info)
    b = U * VARIANCE_WINDOW_FRACTIONS[j]
    rng = np.random.default_rng(j * 1000 + len(counts))
    worst = 0.0
    for _ in range(SEARCH):
        users = [_user_values(rng, m, b) for m in counts]
        grid = GridData.from_user_values(users)
        V = draft.estimator(grid, _Pick(j)).value
        truth = float(np.var(grid.values))
        kept = [u[: int(e)] for u, e in zip(users, info.eff, strict=True)]
        clipped = sum(1 for u in kept if u and max(u) > b)
        spread = variance_spread(info, U, b, clipped).above
        if broken:  # forgets the [0, U] part: only reweighting inside [0, b]
            p = info.eff[info.active] / info.n
            spread = mixture_variance_sensitivity(b, 1.0 - float(np.minimum(p, w).sum()))
        if abs(truth - V) > 0:
            worst = max(worst, abs(truth - V) / max(spread, 1e-300))
        if broken and worst > 1.0:
            return worst  # caught
    return worst


CASES = [([3, 1, 2], None), ([4, 1, 1, 2, 3], [2, 1, 1, 2, 2]), ([1, 1, 1, 1, 6], None)]


@pytest.mark.parametrize(("counts", "caps"), CASES)
@pytest.mark.parametrize("j", [0, 2, 4])
def test_variance_spread_holds_on_every_dataset(
    counts: list[int], caps: list[int] | None, j: int
) -> None:
    assert _worst_ratio(counts, caps, j, broken=False) <= 1.0 + 1e-9


def test_a_spread_without_the_clipped_part_is_caught() -> None:
    assert all(_worst_ratio(c, k, 0, broken=True) > 1.0 for c, k in CASES)


def test_spread_grows_with_clipped_users_and_stays_within_the_range() -> None:
    info = prepare_counts([5, 3, 2, 2, 1, 1, 1, 1])
    spreads = [variance_spread(info, U, U / 3, a).above for a in range(9)]
    assert all(x <= y for x, y in itertools.pairwise(spreads))
    assert spreads[-1] <= U * U / 4 + (U / 3) ** 2 / 4
