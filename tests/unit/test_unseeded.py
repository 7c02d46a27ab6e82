"""The rule of tests/unseeded.py: an unseedable check fails only when two samples fail."""

from __future__ import annotations

import pytest

from tests.unseeded import ALPHA, FALSE_FAILURE, fails_only_twice, laws_hold, rejections


def _samples(*results: list[str]):  # type: ignore[no-untyped-def]
    left = list(results)
    return lambda: left.pop(0)


def test_a_first_failure_alone_is_a_warning_and_a_second_sample_is_drawn() -> None:
    fails_only_twice(_samples([]))  # passes on the first sample: no second one
    with pytest.warns(UserWarning, match="one sample of two failed"):
        fails_only_twice(_samples(["p tiny"], []))


def test_two_failures_fail_with_both_samples_figures() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"first.*then.*second"):
        fails_only_twice(_samples(["first"], ["second"]))


def test_p_values_reject_at_alpha_in_all() -> None:
    assert FALSE_FAILURE == ALPHA**2 == pytest.approx(1e-8)
    assert rejections({"a": ALPHA / 2, "b": 0.5}) == [f"a: p = {ALPHA / 2:.3g} <= {ALPHA / 2:.3g}"]
    assert rejections({"a": ALPHA / 2 * 1.01, "b": 0.5}) == []
    with pytest.warns(UserWarning, match="law: p = 0"):
        laws_hold(_samples({"law": 0.0}, {"law": 0.3}))
