"""The ITMS-like grid of 002 §IV (docs/math.md §7.1): exact count facts, scalings, speeds."""

from __future__ import annotations

import numpy as np
import pytest

from app.synth.itms import ITMS_MEAN, ITMS_U, ITMS_VARIANCE, itms_counts
from research.workloads import (
    check_itms_counts,
    itms_grid,
    projected_normal,
    sample_scaled,
    user_scaled,
)


def test_counts_match_every_published_fact():
    c = itms_counts()
    assert c.dtype == np.int64 and c.size == 217
    assert np.all(np.diff(c) <= 0)  # largest first
    # 002 §IV-B: L, m*, m_*, n, median; and K = 160, K̄ = 164 with m_UB of eq. 9.
    assert check_itms_counts(c) == {
        "L": 217, "m_max": 417, "m_min": 1, "n": 17166, "median": 46,
        "m_ub_eq9": 50, "K": 160, "K_bar": 164,
    }  # fmt: skip
    assert np.array_equal(c, itms_counts())  # deterministic
    c[0] = 0  # a fresh array each call
    assert itms_counts()[0] == 417


def test_sample_and_user_scaling():
    c = itms_counts()
    s = check_itms_counts(sample_scaled(c))
    assert (s["L"], s["m_max"], s["m_min"], s["n"], s["median"]) == (217, 4170, 10, 171660, 460)
    assert (s["K"], s["K_bar"]) == (160, 164)  # 002 Lemma IV.1: arrays do not grow
    u = user_scaled(c)
    assert u.size == 2170 and np.array_equal(u[:10], np.full(10, 417))
    f = check_itms_counts(u)
    assert (f["m_max"], f["m_min"], f["n"], f["median"]) == (417, 1, 171660, 46)
    with pytest.raises(ValueError, match="lambda"):
        sample_scaled(c, 0)
    with pytest.raises(ValueError, match="lambda"):
        user_scaled(c, 2.5)


def test_projected_normal_speeds():
    x = projected_normal(np.random.default_rng(0), 200_000)
    assert x.min() == 0.0 and x.max() <= ITMS_U
    # Mass at 0 is Q(μ/σ) (002 §IV-C) ≈ 0.0269.
    assert np.mean(x == 0.0) == pytest.approx(0.0269, abs=0.002)
    # Projection moves the mean only a little above μ (the clipped left tail).
    assert abs(x.mean() - ITMS_MEAN) < 0.2
    assert x.var() < ITMS_VARIANCE


def test_itms_grid_is_seeded():
    a = itms_grid(np.random.default_rng(3))
    b = itms_grid(np.random.default_rng(3))
    assert np.array_equal(a.values, b.values)
    assert np.array_equal(a.counts, itms_counts())
    assert not np.array_equal(a.values, itms_grid(np.random.default_rng(4)).values)
