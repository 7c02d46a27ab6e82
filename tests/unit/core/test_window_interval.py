"""``user_window``'s honest interval (docs/math.md §11.6), checked by brute force.

* :func:`window_spread`: over every dataset whose users' kept and dropped records sit at
  ``{0, b, U}`` (where the bias is extreme), ``μ - T`` stays within the spread whenever at
  most ``A`` users are clipped, and reaches both ends (the bound is exact).
* :func:`clipped_bound`: the exact law of OpenDP's noisy max (exponential noise,
  quadrature) puts at most ``β`` on a window clipping more users than the bound, on the
  data most likely to break it; a bound with half its slack fails there.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from app.core.data.counts import prepare_counts
from app.core.data.grid import GridData
from app.core.mechanisms.mean_window import (
    SPREAD_BETA,
    WINDOW_FRACTIONS,
    clipped_bound,
    plan_user_window,
    window_penalties,
    window_spread,
)
from app.core.noise.laplace import calibrate_choice_scale
from tests.security.audit_choices import noisy_max_law

U = 30.0


class _Pick:
    """No noise; the window is the ``j``-th candidate."""

    def __init__(self, j: int) -> None:
        self.j = j

    def laplace(self, value: float, scale: float) -> float:
        return value

    def noisy_max(self, scores: object, epsilon: float, *, sensitivity: int = 1) -> int:
        return self.j


@pytest.mark.parametrize(
    ("counts", "caps"),
    [([3, 1, 2], None), ([3, 1, 2, 2], [1, 1, 0, 2]), ([4, 2, 1], [2, 2, 1])],
)
@pytest.mark.parametrize("j", [0, 1, 2])
def test_window_spread_is_exact_by_brute_force(counts: list[int], caps: list[int] | None, j: int):
    info = prepare_counts(counts, caps)
    draft = plan_user_window(info, U, 1.0, 0.2)
    b = U * WINDOW_FRACTIONS[j]
    eff = info.eff
    lows: dict[int, float] = {}
    highs: dict[int, float] = {}
    levels = (0.0, b, U)
    for kept_at in itertools.product(levels, repeat=len(counts)):
        for dropped_at in itertools.product((0.0, U), repeat=len(counts)):
            users = [
                [kept_at[u]] * int(eff[u]) + [dropped_at[u]] * int(counts[u] - eff[u])
                for u in range(len(counts))
            ]
            grid = GridData.from_user_values(users)
            est = draft.estimator(grid, _Pick(j))
            gap = float(np.mean(grid.values)) - est.value
            clipped = sum(kept_at[u] > b for u in range(len(counts)) if eff[u] > 0)
            lows[clipped] = min(lows.get(clipped, math.inf), gap)
            highs[clipped] = max(highs.get(clipped, -math.inf), gap)
    for a in range(info.n_active + 1):
        spread = window_spread(info, U, b, a)
        low = min(v for k, v in lows.items() if k <= a)
        high = max(v for k, v in highs.items() if k <= a)
        assert low == pytest.approx(-spread.below, abs=1e-12)
        assert high == pytest.approx(spread.above, abs=1e-12)


def _worst_case_miss(L: int, eps: float, slack_factor: float) -> float:
    """The largest probability, over windows j and monotone clip counts, that the chosen
    window clips more users than ``clipped_bound`` (its slack scaled by ``slack_factor``)."""
    e_w, e_n = 0.2 * eps, 0.8 * eps
    bounds = U * np.asarray(WINDOW_FRACTIONS)
    pen = window_penalties(U, bounds, 1.0 / L, L, e_n)  # equal counts: w* = 1/L
    scale = calibrate_choice_scale(1, 2.0 * e_w)
    worst = 0.0
    for j in range(len(bounds) - 1):
        full = int(clipped_bound(pen, j, e_w))
        base = math.floor(int(pen[-1]) - int(pen[j]))
        bound = base + math.floor((full - base) * slack_factor)
        over = bound + 1  # the fewest users that break the bound: the likeliest breach
        # smaller windows clip at least as many (L: as unlikely as possible), larger ones
        # at most as many (as many: as unlikely as possible), the top window none
        clipped = np.array([L] * j + [over] * (len(bounds) - 1 - j) + [0])
        law = noisy_max_law(-clipped - pen, scale)
        worst = max(worst, float(law[j]))
    return worst


CASES = ((2000, 5.0), (400, 2.0), (5000, 1.0))  # grids where the bound is below L


def test_clipped_bound_fails_at_most_beta_of_the_time() -> None:
    for L, eps in CASES:
        miss = _worst_case_miss(L, eps, 1.0)
        assert miss <= SPREAD_BETA, (L, eps, miss)
        # the union bound over C = 5 windows and whole users costs about a factor 12
        assert miss > SPREAD_BETA / 25, (L, eps, miss)
    # a bound with half the slack is broken more often than β
    assert max(_worst_case_miss(L, eps, 0.5) for L, eps in CASES) > SPREAD_BETA
