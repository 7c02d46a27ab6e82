"""Closed-form sensitivities and worst-case biases against numerical optimisation
(docs/math.md §2–§3)."""

from __future__ import annotations

import numpy as np
import pytest

from app.core import plan_mean, plan_variance
from app.core.mechanisms.bounds import (
    mean_clip_bias,
    mean_sensitivity,
    variance_clip_bias,
    variance_sensitivity,
)
from tests.unit.core import bruteforce

U = 1.7
TOL = 1e-7


def _occupancies(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 9, size=int(rng.integers(2, 6))) for _ in range(count)]


def _check_sensitivities(counts: np.ndarray, rng: np.random.Generator) -> None:
    n, top = int(counts.sum()), int(counts.max())
    found_mean = bruteforce.sensitivity("mean", counts, U, rng)
    found_var = bruteforce.sensitivity("var", counts, U, rng)
    assert found_mean == pytest.approx(mean_sensitivity(U, top, n), abs=TOL)
    assert found_var == pytest.approx(variance_sensitivity(U, top, n), abs=TOL)


def _check_clipped(counts: np.ndarray, rng: np.random.Generator) -> None:
    """Random Γ_l <= m_l: sensitivities on the kept records, biases against all records."""
    kept = np.array([int(rng.integers(0, c + 1)) for c in counts])
    if kept.sum() == 0:
        kept[0] = 1
    n, s = int(counts.sum()), int(kept.sum())
    pos = kept[kept > 0]
    # sensitivities of the clipped estimators (004 eq. 9, Lemma III.3)
    assert bruteforce.sensitivity("mean", pos, U, rng) == pytest.approx(
        mean_sensitivity(U, int(pos.max()), s), abs=TOL
    )
    assert bruteforce.sensitivity("var", pos, U, rng) == pytest.approx(
        variance_sensitivity(U, int(pos.max()), s), abs=TOL
    )
    # worst-case biases (004 Thm IV.1, Thm IV.2 corrected)
    assert bruteforce.clip_bias("mean", s, n, U, rng) == pytest.approx(
        mean_clip_bias(U, s, n), abs=TOL
    )
    assert bruteforce.clip_bias("var", s, n, U, rng) == pytest.approx(
        variance_clip_bias(U, s, n), abs=TOL
    )


@pytest.mark.parametrize("counts", _occupancies(seed=11, count=8), ids=str)
def test_sensitivities_match_bruteforce(counts: np.ndarray) -> None:
    _check_sensitivities(counts, np.random.default_rng(int(counts.sum())))


@pytest.mark.parametrize("counts", _occupancies(seed=12, count=8), ids=str)
def test_clipped_sensitivities_and_biases_match_bruteforce(counts: np.ndarray) -> None:
    _check_clipped(counts, np.random.default_rng(int(counts.sum()) + 1))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_bruteforce_extended(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for counts in _occupancies(seed=200 + seed, count=12):
        _check_sensitivities(counts, rng)
        _check_clipped(counts, rng)


def test_spec_counterexample_variance_bias() -> None:
    """docs/math.md §3.2: n = 8, keep 1 of 4 per user (s = 2): bias U²/4, above the
    printed 0.1875 U²."""
    rng = np.random.default_rng(3)
    printed = U * U * 2 * 6 / 64
    found = bruteforce.clip_bias("var", 2, 8, U, rng)
    assert found == pytest.approx(U * U / 4, abs=TOL)
    assert found > printed
    assert variance_clip_bias(U, 2, 8) == pytest.approx(U * U / 4)
    # the explicit dataset of docs/math.md §3.2: kept {0, 0}, others {0, 0, 1, 1, 1, 1} (times U)
    full = U * np.array([0, 0, 0, 0, 1, 1, 1, 1.0])
    assert full.var() - full[:2].var() == pytest.approx(U * U / 4)
    # and the engine reports it: clip with m = 1 on two users with 4 records each
    plan = plan_variance([4, 4], U, 1.0, "clip", m=1)
    assert plan.worst_case_bias == pytest.approx(U * U / 4)


@pytest.mark.parametrize("L", [1, 2, 3, 7, 50])
def test_item_level_variance_sensitivity(L: int) -> None:
    """004 Cor III.1: all counts 1 gives ΔVar = U²(L-1)/L²."""
    assert variance_sensitivity(U, 1, L) == pytest.approx(U * U * (L - 1) / L**2)
    plan = plan_variance(np.ones(L, dtype=int), U, 1.0, "baseline")
    assert plan.sensitivity == pytest.approx(U * U * (L - 1) / L**2)
    if L <= 7:
        found = bruteforce.sensitivity("var", [1] * L, U, np.random.default_rng(L))
        assert found == pytest.approx(U * U * (L - 1) / L**2, abs=TOL)


def test_engine_reports_the_closed_forms() -> None:
    counts = np.array([5, 1, 3, 8])
    n = int(counts.sum())
    assert plan_mean(counts, U, 1.0, "baseline").sensitivity == pytest.approx(U * 8 / n)
    plan = plan_variance(counts, U, 1.0, "clip", m=3)
    s = int(np.minimum(counts, 3).sum())
    assert plan.sensitivity == pytest.approx(variance_sensitivity(U, 3, s))
    assert plan.worst_case_bias == pytest.approx(variance_clip_bias(U, s, n))
