"""``equal_share``: a release's statistics split its ε equally and never spend more."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from app.answers.epsilon import equal_share, parse_epsilon


def test_the_shares_sum_to_at_most_what_is_used_and_are_the_largest_such_float() -> None:
    rng = np.random.default_rng(7)
    rounded_down = 0
    for value in [0.9, 0.3, 1.0, 0.1, 2.0 / 3.0, *rng.uniform(1e-3, 10.0, 300).tolist()]:
        eps = parse_epsilon(value)
        for n in (1, 2, 3):
            share = equal_share(eps, n)
            assert Fraction(share.used) * n <= Fraction(eps.used)
            # one float up would overspend (or is above the real share): the largest such
            up = np.nextafter(share.used, np.inf)
            assert Fraction(float(up)) * n > Fraction(eps.used)
            rounded_down += share.used < eps.used / n
    assert rounded_down > 0  # the case that needed the rule occurs
