"""The private choices' audit machinery: the exact law of report-noisy-max (by
quadrature), the law of the old inverse-CDF draw, the exact loss between two laws, levy's
interval step on its neighbours, and the production sampler's draws for the audit
(test_sampler.py, test_privacy_audit.py; the linear mechanisms': audit_lib.py)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app import core
from app.core import GridData
from tests.security.audit_lib import RecordingNoise, U


def noisy_max_law(scores: npt.ArrayLike, scale: float) -> np.ndarray:
    """The exact law of report-noisy-max with exponential noise of ``scale`` on ``scores``
    (OpenDP's ``make_noisy_max`` over ``max_divergence``), by quadrature to ~1e-12 relative:
    ``P(i) = e^{-g_i} ∫_0^∞ e^{-y} Π_{j≠i} (1 - e^{-(y + g_j)}) dy``, ``g = (max s - s)/scale``."""
    from scipy import integrate

    s = np.asarray(scores, dtype=np.float64)
    gap = (s.max() - s) / scale
    out = np.empty(s.size)
    for i in range(s.size):
        others = np.delete(gap, i)

        def f(y: float, others: np.ndarray = others) -> float:
            return float(np.exp(-y) * np.prod(-np.expm1(-(y + others))))

        v, _ = integrate.quad(f, 0.0, np.inf, epsabs=0.0, epsrel=1e-12, limit=400)
        out[i] = np.exp(-gap[i]) * v
    return out


def inverse_cdf_draw(log_weights: npt.ArrayLike, u: float) -> int:
    """The OLD release-path draw, kept here only as the deliberately broken copy: the
    index whose cumulative weight interval holds a 53-bit uniform ``u`` (weights
    shifted by their maximum, exponentiated and summed in floats)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    cdf = np.cumsum(np.exp(lw - lw.max()))
    idx = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return idx if idx < lw.size else int(np.flatnonzero(lw > -np.inf)[-1])


def inverse_cdf_law(log_weights: npt.ArrayLike) -> np.ndarray:
    """The exact law of :func:`inverse_cdf_draw` with ``u = k/2^53``, ``k`` uniform on
    ``[0, 2^53)``: the index is non-decreasing in ``k``, so each index's set of ``k`` is an
    interval found by bisection; probabilities are multiples of ``2^-53``."""
    lw = np.asarray(log_weights, dtype=np.float64)
    two53 = 1 << 53

    def first_k(i: int) -> int:  # smallest k whose draw is >= i (2^53 if none)
        lo, hi = 0, two53
        while lo < hi:
            mid = (lo + hi) // 2
            if inverse_cdf_draw(lw, mid / two53) >= i:
                hi = mid
            else:
                lo = mid + 1
        return lo

    starts = [first_k(i) for i in range(lw.size)] + [two53]
    return np.array([(starts[i + 1] - starts[i]) / two53 for i in range(lw.size)])


class ScoreRecorder(RecordingNoise):
    """No Laplace noise; records each private choice's (scores, epsilon, sensitivity) and
    answers it with the top score (any fixed answer would do for reading the scores)."""

    def __init__(self) -> None:
        self.choices: list[tuple[np.ndarray, float, int]] = []

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        s = np.asarray(scores, dtype=np.int64)
        self.choices.append((s, float(epsilon), int(sensitivity)))
        return int(np.argmax(s))


def exact_choice_loss(p0: np.ndarray, p1: np.ndarray) -> float:
    """``max_i |ln p0_i / p1_i|`` (infinite when one side is 0 and the other is not)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(np.log(p0) - np.log(p1))
    both_zero = (p0 == 0) & (p1 == 0)
    return float(np.max(np.where(both_zero, 0.0, r)))


# levy's interval step, audited on its own neighbours: 40 users with 200 records each
# (m_UB = 200, K̄ = 40 one-user arrays, τ ≈ 0.12 U: 9 bins); the others' values sit
# in the middle bins and user 0's move from 0 to U.
LEVY_EPS = 2.0


def levy_neighbours() -> tuple[GridData, GridData]:
    grids = []
    for heavy in (0.0, U):
        users = [[heavy] * 200] + [
            [U * (0.35 + 0.3 * ((7 * i) % 39) / 38.0)] * 200 for i in range(1, 40)
        ]
        grids.append(GridData.from_user_values(users))
    return grids[0], grids[1]


def levy_interval_scores() -> tuple[np.ndarray, np.ndarray, float, int]:
    """The scores levy passes to ``noisy_max`` on each neighbour, and its epsilon/sensitivity."""
    rec = []
    for grid in levy_neighbours():
        src = ScoreRecorder()
        core.release_mean(grid, U, LEVY_EPS, "levy", noise=src)
        assert len(src.choices) == 1
        rec.append(src.choices[0])
    (s0, e0, d0), (s1, e1, d1) = rec
    assert e0 == e1 and d0 == d1
    return s0, s1, e0, d0


# The tight pair for report-noisy-max on scores that may move both ways: candidate 1
# gains 2 relative to candidate 0, and P(1) changes by exactly e^eps.
CHOICE_EPS = 0.5
CHOICE_PAIR = (np.array([0, 0]), np.array([-1, 1]))


def choice_scores(name: str) -> tuple[np.ndarray, np.ndarray, float, int]:
    """``(scores on D0, scores on D1, epsilon, sensitivity)`` of an audited private choice."""
    if name == "noisy_max":
        return CHOICE_PAIR[0], CHOICE_PAIR[1], CHOICE_EPS, 1
    if name == "levy_interval":
        return levy_interval_scores()
    raise ValueError(name)


def sample_choices(job: tuple[str, int, int, float]) -> np.ndarray:
    """``(choice name, side, n, budget factor)`` -> ``n`` indices drawn by the production
    :meth:`~app.core.noise.laplace.OpenDPNoise.noisy_max` at ``epsilon · factor`` (factor != 1: a
    deliberately broken copy, e.g. 0.5 for levy's old ``exp(-ε c/8)`` weight)."""
    from app.core.noise.laplace import OpenDPNoise

    name, side, n, factor = job
    s0, s1, eps, sens = choice_scores(name)
    scores = (s0, s1)[side]
    src = OpenDPNoise()
    return np.array(
        [src.noisy_max(scores, eps * factor, sensitivity=sens) for _ in range(n)], dtype=float
    )
