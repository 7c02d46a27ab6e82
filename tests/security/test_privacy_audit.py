"""A statistical privacy audit of the release path (in the spirit of Google's stochastic
tester and DP Auditorium).

Neighbouring grids (same occupancy; one user's values all moved from 0 to U) are
released 10^5 times per side for each audited statistic (baseline and clip mean,
baseline and clip variance, worst_case_optimal) through ``app.core.release_mean`` /
``release_variance``. Samples are binned on fixed edges and the privacy loss is
bounded from below with Clopper–Pearson intervals; the audit fails if that lower
bound exceeds eps. Confidence: alpha = 0.01 for the whole audit (Bonferroni over
the five statistics and centred_clip, and over every event and interval within each),
and each check fails only when two independent samples both fail it
(:mod:`tests.unseeded`: OpenDP's sampler takes no seed), so a correct mechanism fails
the audit with probability at most 1e-4.

Noise source: :class:`tests.security.audit_lib.BulkOpenDPNoise` — OpenDP's own
``make_laplace`` on a vector domain, i.e. the production sampler drawn 10^5 at a
time (a scalar OpenDP draw costs ~0.2 ms; 10^6 of them would take minutes).
``test_bulk_source_has_the_production_law`` shows with KS tests that it has the law
of the production :class:`app.core.noise.laplace.OpenDPNoise` on the same release.

centred_clip (a private centre and width, then Laplace) is audited on its own
neighbours and eps (``audit_lib.ADAPTIVE_*``, where its public gate is met), with
full releases through the production :class:`app.core.noise.laplace.OpenDPNoise`; its
output is encoded so that the events are "(centre, width) is the most likely cell
and the estimate lies in a bin" (events of the whole output, so the bound is valid).

Power: the same audit, on mechanisms broken in this module only (noise scale × 0.7;
sensitivity computed with m* replaced by the mean count), must report a loss
above eps — with 5× fewer samples, so detection is not an artefact of sample size.

Private choices (``NoiseSource.noisy_max``, OpenDP's exact report-noisy-max): the
production sampler is audited on the pair of score vectors that makes its loss
exactly eps, and on the scores levy's interval step really computes on neighbouring
grids (``audit_choices.levy_neighbours``). Broken copies: the sampler at twice its budget
(must be caught above eps) and levy's old ``exp(-ε c/8)`` weight (half its share:
the audit must see that it spends under 0.65 of what it charges, where the real one
spends more). The old inverse-CDF draw cannot be caught by sampling (its failures
have probability 2^-53); ``test_sampler.py`` audits it, and the real sampler, on
their exact laws.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from scipy import stats

from tests.security import audit_choices as choices
from tests.security import audit_lib as audit
from tests.unseeded import fails_only_twice

N = 100_000
N_BROKEN = 20_000
ALPHA = 0.01
ALPHA_EACH = ALPHA / (len(audit.TARGETS) + 3)  # + centred_clip, noisy_max, levy's interval


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    ctx = multiprocessing.get_context("spawn")  # no fork of a threaded test process
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
        yield ex


def _samples(
    pool: ProcessPoolExecutor, target: audit.Target, n: int, factor: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    half = n // 2  # two chunks per side keep both workers busy
    jobs = [(target.name, side, half, factor) for side in (0, 1) for _ in range(2)]
    parts = list(pool.map(audit.sample, jobs))
    return np.concatenate(parts[:2]), np.concatenate(parts[2:])


def _audit(
    pool: ProcessPoolExecutor, target: audit.Target, n: int, factor: float = 1.0
) -> tuple[audit.AuditResult, float]:
    v0, v1, scale, _ = audit.noiseless(target)
    edges = audit.fixed_edges(v0, v1, scale)  # from the correct plan, before any sampling
    x0, x1 = _samples(pool, target, n, factor)
    true_loss = abs(v1 - v0) / (scale * factor)
    return audit.loss_lower_bound(x0, x1, edges, ALPHA_EACH), true_loss


def test_neighbours_move_each_statistic_by_its_sensitivity() -> None:
    """The audit is only as strong as its neighbours: each pair must be a worst case."""
    for target in audit.TARGETS:
        v0, v1, scale, release = audit.noiseless(target)
        assert abs(v1 - v0) == pytest.approx(release.sensitivity, rel=1e-9), target.name
        assert scale >= release.sensitivity / audit.EPS and scale == pytest.approx(
            release.sensitivity / audit.EPS, rel=1e-12
        )
    # the clipped targets really clip (otherwise they would repeat the baselines)
    assert audit.noiseless(audit.BY_NAME["clip mean"])[3].kept.max() < max(audit.COUNTS)
    assert audit.noiseless(audit.BY_NAME["clip variance"])[3].kept.max() < max(audit.COUNTS)


@pytest.mark.slow
@pytest.mark.parametrize("target", audit.TARGETS, ids=lambda t: t.name)
def test_audit_bounds_the_loss_by_eps(pool: ProcessPoolExecutor, target: audit.Target) -> None:
    def check() -> list[str]:
        result, true_loss = _audit(pool, target, N)
        print(f"\naudit {target.name}: loss >= {result.bound:.4f} (eps {audit.EPS})")
        assert true_loss <= audit.EPS * (1 + 1e-9)
        # at most eps, and tight enough to mean something: within 15% of eps
        return [] if 0.85 * audit.EPS < result.bound <= audit.EPS else [str(result)]

    fails_only_twice(check)


def _broken_variants() -> list[tuple[str, str, float]]:
    out = [(t.name, "noise scale x 0.7", 0.7) for t in audit.TARGETS]
    for t in audit.TARGETS:
        _, _, _, release = audit.noiseless(t)
        broken = audit.mean_count_sensitivity(t, np.asarray(release.kept))
        # (capped_weights' weights are capped already: that copy barely shrinks its noise)
        if broken is not None and broken / release.sensitivity < 0.75:
            out.append((t.name, "m* -> mean count", broken / release.sensitivity))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "variant", "factor"), _broken_variants(), ids=lambda v: str(v).replace(" ", "_")
)
def test_audit_detects_broken_mechanisms(
    pool: ProcessPoolExecutor, name: str, variant: str, factor: float
) -> None:
    assert factor < 0.75, "a broken variant must really shrink the noise"

    def check() -> list[str]:
        result, true_loss = _audit(pool, audit.BY_NAME[name], N_BROKEN, factor)
        print(
            f"\naudit {name} [{variant}, scale x {factor:.3f}, true loss {true_loss:.3f}]: "
            f"loss >= {result.bound:.4f} at {result.event}"
        )
        return [] if result.bound > audit.EPS else [str(result)]

    fails_only_twice(check)


@pytest.mark.slow
def test_bulk_source_has_the_production_law() -> None:
    """Releases through the production ``OpenDPNoise`` (the engine's default) and through
    the bulk source have the same law: two-sample KS, and each against the exact
    Laplace CDF projected onto [0, U]; a 25% scale error is caught by the same KS test
    (its power)."""
    target = audit.BY_NAME["baseline mean"]
    _, d1 = audit.neighbours()
    _, v1, scale, _ = audit.noiseless(target)
    m = 10_000
    level = 1e-3  # each test here errs with probability <= 0.001 on one sample
    # releases are projected onto [0, U]: Laplace with its tails piled on the two ends.
    # Inside (0, U) the draws follow the Laplace law truncated to (0, U) (KS); the masses
    # at 0 and at U are binomial with the Laplace tail probabilities.
    lap = stats.laplace(loc=v1, scale=scale)
    lo_mass, hi_mass = lap.cdf(0.0), lap.sf(audit.U)

    def truncated(x: np.ndarray) -> np.ndarray:
        return (lap.cdf(x) - lo_mass) / (1.0 - lo_mass - hi_mass)

    assert 0.0 < lo_mass < 0.5 and 0.0 < hi_mass < 0.5  # the projection is really exercised

    def laws() -> list[str]:
        production = np.array([target.release(d1, None).estimate for _ in range(m)])
        bulk = np.asarray(target.release(d1, audit.BulkOpenDPNoise(m)).estimate)
        p = {"production = bulk": stats.ks_2samp(production, bulk).pvalue}
        for source, draws in (("production", production), ("bulk", bulk)):
            inside = draws[(draws > 0.0) & (draws < audit.U)]
            p[f"{source} inside"] = stats.kstest(inside, truncated).pvalue
            for atom, mass in ((0.0, lo_mass), (audit.U, hi_mass)):
                hits = int(np.sum(draws == atom))
                p[f"{source} at {atom}"] = stats.binomtest(hits, m, mass).pvalue
        return [f"{k}: p = {v:.3g}" for k, v in p.items() if v <= level]

    fails_only_twice(laws)
    production = np.array([target.release(d1, None).estimate for _ in range(m)])
    wider = audit.ScaledNoise(audit.BulkOpenDPNoise(m), 1.25)
    wrong = np.asarray(target.release(d1, wider).estimate)
    assert stats.ks_2samp(production, wrong).pvalue < level


N_ADAPTIVE = 40_000


def _adaptive_samples(
    pool: ProcessPoolExecutor, n: int, factor: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    half = n // 2
    jobs = [(side, half, factor) for side in (0, 1) for _ in range(2)]
    parts = list(pool.map(audit.sample_adaptive, jobs))
    return np.concatenate(parts[:2]), np.concatenate(parts[2:])


def test_centred_clip_neighbours_move_its_estimate_by_its_sensitivity() -> None:
    """In the audited (centre, width) cell the heavy user's move realises the sensitivity,
    and the Laplace step gets 0.4 of eps."""
    v0, v1, scale, release = audit.adaptive_noiseless()
    assert release.details["path"] == "adaptive"
    assert abs(v1 - v0) == pytest.approx(release.sensitivity, rel=1e-9)
    assert scale == pytest.approx(release.sensitivity / (0.4 * audit.ADAPTIVE_EPS), rel=1e-12)


@pytest.mark.slow
def test_audit_centred_clip(pool: ProcessPoolExecutor) -> None:
    v0, v1, scale, _ = audit.adaptive_noiseless()
    edges = audit.fixed_edges(v0, v1, scale)

    def check() -> list[str]:
        x0, x1 = _adaptive_samples(pool, N_ADAPTIVE)
        assert min(np.mean(x0 < audit.SENTINEL), np.mean(x1 < audit.SENTINEL)) > 0.1
        result = audit.loss_lower_bound(x0, x1, edges, ALPHA_EACH)
        print(f"\naudit centred_clip: loss >= {result.bound:.4f} (eps {audit.ADAPTIVE_EPS})")
        # the Laplace step alone has loss 0.4 eps in the cell: the audit sees most of it
        within = 0.25 * audit.ADAPTIVE_EPS < result.bound <= audit.ADAPTIVE_EPS
        return [] if within else [str(result)]

    def broken() -> list[str]:
        samples = _adaptive_samples(pool, N_ADAPTIVE, 0.1)
        result = audit.loss_lower_bound(*samples, edges, ALPHA_EACH)
        print(f"audit centred_clip [noise scale x 0.1]: loss >= {result.bound:.4f}")
        return [] if result.bound > audit.ADAPTIVE_EPS else [str(result)]

    fails_only_twice(check)
    fails_only_twice(broken)


# --------------------------------------------------------------- private choices
N_CHOICE = 30_000


def _choice_samples(
    pool: ProcessPoolExecutor, name: str, n: int, factor: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    half = n // 2
    jobs = [(name, side, half, factor) for side in (0, 1) for _ in range(2)]
    parts = list(pool.map(choices.sample_choices, jobs))
    return np.concatenate(parts[:2]), np.concatenate(parts[2:])


def _choice_audit(
    pool: ProcessPoolExecutor, name: str, n: int, factor: float = 1.0
) -> audit.AuditResult:
    s0, _, _, _ = choices.choice_scores(name)
    edges = np.arange(len(s0) + 1) - 0.5  # one bin per candidate, fixed in advance
    return audit.loss_lower_bound(*_choice_samples(pool, name, n, factor), edges, ALPHA_EACH)


@pytest.mark.slow
def test_audit_noisy_max(pool: ProcessPoolExecutor) -> None:
    eps = choices.CHOICE_EPS

    def check() -> list[str]:
        result = _choice_audit(pool, "noisy_max", N_CHOICE)
        print(f"\naudit noisy_max: loss >= {result.bound:.4f} at {result.event}")
        # the pair's true loss is eps
        return [] if 0.75 * eps < result.bound <= eps else [str(result)]

    def broken() -> list[str]:
        result = _choice_audit(pool, "noisy_max", N_CHOICE // 3, factor=2.0)
        print(f"audit noisy_max [twice its budget]: loss >= {result.bound:.4f}")
        return [] if result.bound > eps else [str(result)]

    fails_only_twice(check)
    fails_only_twice(broken)


@pytest.mark.slow
def test_audit_levy_interval_spends_its_share(pool: ProcessPoolExecutor) -> None:
    """levy charges ε/2 for its interval: the audited loss is at most that, and more than
    0.65 of it (its exact loss on these neighbours is 0.9999 of it); the old
    ``exp(-ε c/8)`` weight (budget × 0.5, exact loss 0.496 of the share) stays under 0.65."""
    _, _, eps, _ = choices.choice_scores("levy_interval")
    assert eps == choices.LEVY_EPS / 2

    def check() -> list[str]:
        result = _choice_audit(pool, "levy_interval", N_CHOICE)
        print(f"\naudit levy interval: loss >= {result.bound:.4f} (share {eps})")
        return [] if 0.65 * eps < result.bound <= eps else [str(result)]

    def old() -> list[str]:
        result = _choice_audit(pool, "levy_interval", N_CHOICE, factor=0.5)
        print(f"audit levy interval [old exp(-eps c/8)]: loss >= {result.bound:.4f}")
        return [] if result.bound <= 0.65 * eps else [str(result)]

    fails_only_twice(check)
    fails_only_twice(old)
