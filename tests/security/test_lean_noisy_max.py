"""Audit of the lean noisy-max invocation (app/core/noise/noisy_max_invoke.py, docs/math.md §9.4.8).

Every private choice of a release goes through :meth:`OpenDPNoise.noisy_max`, which now
invokes OpenDP's ``make_noisy_max`` measurement without the wrapper's per-call
conversions. Its choices must have exactly the law of report-noisy-max with exponential
noise (:func:`tests.security.audit_lib.noisy_max_law`, by quadrature): a chi-square test
at alpha = 1e-4 per case, failing only when two independent samples both reject
(:mod:`tests.unseeded`: OpenDP's CSPRNG takes no seed; a correct sampler fails with
probability 1e-8). Two deliberately broken copies must fail the same test (with 20,000 draws
their p-values are far below 1e-12): the scores handed over in reverse and the index read
as if they were not (a mix-up of positions), and the noise scale halved.
"""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import pytest
from scipy import stats

from app.core.noise import laplace as noise_mod
from app.core.noise.laplace import OpenDPNoise, calibrate_choice_scale, check_scores
from app.core.noise.noisy_max_invoke import invoke_noisy_max, lean_invoke_works
from tests.security.audit_choices import noisy_max_law
from tests.unseeded import laws_hold

N = 20_000
CASES = [  # (scores, epsilon): spread laws, ties, a dominant score, negative scores
    ([0, -1, -1, -3, -6], 1.0),
    ([-40, -37, -52, -38, -90], 0.35),
    ([5, 2], 2.0),
]


def _p_value(choices: np.ndarray, law: np.ndarray) -> float:
    observed = np.bincount(choices, minlength=law.size)
    keep = law * N >= 5  # chi-square cells with enough expectation; the rest pooled
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(law[keep], law[~keep].sum()) * N
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def _draws(choose) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.fromiter((choose() for _ in range(N)), dtype=np.int64, count=N)


def test_the_lean_path_is_in_use_and_matches_opendp_without_noise() -> None:
    assert lean_invoke_works() and noise_mod._LEAN
    space = (dp.vector_domain(dp.atom_domain(T="i64")), dp.linf_distance(T="i64"))
    meas = dp.m.make_noisy_max(*space, dp.max_divergence(), scale=0.0)
    rng = np.random.default_rng(3)
    for _ in range(200):
        scores = rng.integers(-(1 << 40), 1 << 40, size=int(rng.integers(1, 9))).tolist()
        assert invoke_noisy_max(meas, scores) == meas(scores) == int(np.argmax(scores))


@pytest.mark.parametrize(("scores", "eps"), CASES)
def test_lean_choices_have_the_law_of_report_noisy_max(scores: list[int], eps: float) -> None:
    law = noisy_max_law(scores, calibrate_choice_scale(1, eps))
    src = OpenDPNoise()
    laws_hold(lambda: {"choices": _p_value(_draws(lambda: src.noisy_max(scores, eps)), law)})


@pytest.mark.slow  # an audit's power: 80,000 draws
@pytest.mark.parametrize(("scores", "eps"), CASES[:2])
def test_broken_copies_are_caught(scores: list[int], eps: float) -> None:
    scale = calibrate_choice_scale(1, eps)
    law = noisy_max_law(scores, scale)
    right = noise_mod._CHOICES.get((scale, 1, eps))
    values = check_scores(scores)
    reversed_ = _draws(lambda: invoke_noisy_max(right, values[::-1]))
    assert _p_value(reversed_, law) < 1e-12  # positions mixed up
    half = noise_mod._CHOICES.get((scale / 2.0, 1, 2.0 * eps))
    assert _p_value(_draws(lambda: invoke_noisy_max(half, values)), law) < 1e-12  # scale halved


@pytest.mark.slow  # the fallback is not in use (the first test): 20,000 draws of it
def test_the_public_fallback_has_the_same_law(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(noise_mod, "_LEAN", False)
    scores, eps = CASES[0]
    law = noisy_max_law(scores, calibrate_choice_scale(1, eps))
    src = OpenDPNoise()
    laws_hold(lambda: {"choices": _p_value(_draws(lambda: src.noisy_max(scores, eps)), law)})


# ---------------------------------------------------------- many rows (docs/math.md §9.4.9)
ROW_A, ROW_B, ROW_EPS = [0, -1, -1, -3, -6], [-6, -3, -1, -1, 0], 1.0


def _alternating() -> np.ndarray:
    return np.array([ROW_A, ROW_B] * (N // 2), dtype=np.int64)


def _independence_p(choices: np.ndarray) -> float:
    """Chi-square test that the choices of rows 2i and 2i+1 are independent."""
    table = np.zeros((5, 5))
    np.add.at(table, (choices[0::2], choices[1::2]), 1)
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    return float(stats.chi2_contingency(table).pvalue)


def _rows_verdict(choices: np.ndarray) -> dict[str, float]:
    scale = calibrate_choice_scale(1, ROW_EPS)
    law_a, law_b = noisy_max_law(ROW_A, scale), noisy_max_law(ROW_B, scale)
    p_a = _p_value(choices[0::2], law_a)  # N/2 draws each: _p_value scales its expectation
    p_b = _p_value(choices[1::2], law_b)
    return {"row A": p_a, "row B": p_b, "independence": _independence_p(choices)}


def test_batched_rows_have_each_rows_law_independently() -> None:
    """``noisy_max_rows`` (the slot release's path): row ``i``'s choice has the law of
    report-noisy-max on row ``i``'s scores, and consecutive rows are independent."""
    laws_hold(lambda: _rows_verdict(OpenDPNoise().noisy_max_rows(_alternating(), ROW_EPS)))


def _laws(choices: np.ndarray) -> dict[str, float]:
    verdict = _rows_verdict(choices)
    return {"row A": verdict["row A"], "row B": verdict["row B"]}


def test_broken_batched_rows_are_caught() -> None:
    from app.core.noise.noisy_max_invoke import invoke_noisy_max_rows

    scale = calibrate_choice_scale(1, ROW_EPS)
    right = noise_mod._CHOICES.get((scale, 1, ROW_EPS))
    rows = _alternating()
    shifted = np.asarray(invoke_noisy_max_rows(right, np.roll(rows, 1, axis=0)))  # row mix-up
    assert min(_laws(shifted).values()) < 1e-12
    half = noise_mod._CHOICES.get((scale / 2.0, 1, 2.0 * ROW_EPS))
    halved = np.asarray(invoke_noisy_max_rows(half, rows))  # scale halved
    assert min(_laws(halved).values()) < 1e-12

    def reused() -> np.ndarray:  # one draw per pair of rows, row B its mirror
        once = np.asarray(invoke_noisy_max_rows(right, rows[0::2]))
        out = np.repeat(once, 2)
        out[1::2] = 4 - out[1::2]  # row B is row A reversed: the mirrored choice
        return out

    assert _independence_p(reused()) < 1e-12  # not independent
    laws_hold(lambda: _laws(reused()))  # though each row's law is right
