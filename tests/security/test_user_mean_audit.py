"""Statistical privacy audit of ``user_mean`` (docs/math.md §13).

Neighbouring grids (same occupancy; one unit's records all moved from 0 to U, everyone
else at 0: the pair that moves the per-unit mean by exactly its sensitivity ``U/L``) are
released through the production path (``core.release`` with OpenDP's Laplace on a vector
domain, :class:`tests.security.audit_lib.BulkOpenDPNoise`), and the privacy loss is
bounded from below with Clopper–Pearson intervals
(:func:`tests.security.audit_lib.loss_lower_bound`). It must stay below eps on both
occupancies and reach most of it (the audit is sharp enough to mean something). Two
broken copies must be caught above eps with fewer samples: the noise halved, and the
sensitivity ``U/(L+1)`` (counting one unit too many) on a grid of two units, where that
copy's loss is 1.5 eps. Each check fails only when two independent samples both fail it
(:mod:`tests.unseeded`: OpenDP's sampler takes no seed).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from app import core
from app.core import GridData
from tests.security import audit_lib as audit
from tests.unseeded import fails_only_twice

U = audit.U
EPS = audit.EPS
N = 100_000
N_BROKEN = 30_000
ALPHA_EACH = 0.01 / 4  # two honest audits, two broken copies
OCCUPANCIES = {"audit grid": audit.COUNTS, "two units": (3, 1)}


def _neighbours(counts: tuple[int, ...]) -> tuple[GridData, GridData]:
    return tuple(  # type: ignore[return-value]
        GridData.from_user_values([[heavy if i == 0 else 0.0] * c for i, c in enumerate(counts)])
        for heavy in (0.0, U)
    )


def _release(grid: GridData, noise: Any) -> core.Release:
    return core.release("user_mean", grid, U, EPS, "auto", noise=noise)


def _noiseless(counts: tuple[int, ...]) -> tuple[float, float, float, float]:
    """``(value on D0, value on D1, scale, declared sensitivity)`` without noise."""
    out = []
    for grid in _neighbours(counts):
        rec = audit.RecordingNoise()
        rel = _release(grid, rec)
        out.append((rec.value, rec.scale, rel.sensitivity))
    (v0, s0, d0), (v1, s1, _) = out
    assert s0 == s1, "the scale must depend on public counts only"
    return v0, v1, s0, d0


def _loss(counts: tuple[int, ...], n: int, factor: float) -> audit.AuditResult:
    v0, v1, scale, _ = _noiseless(counts)
    edges = audit.fixed_edges(v0, v1, scale)  # from the correct plan, before sampling
    samples = []
    for grid in _neighbours(counts):
        noise: Any = audit.BulkOpenDPNoise(n)
        if factor != 1.0:
            noise = audit.ScaledNoise(noise, factor)
        samples.append(np.asarray(_release(grid, noise).estimate))
    return audit.loss_lower_bound(samples[0], samples[1], edges, ALPHA_EACH)


@pytest.mark.parametrize("name", OCCUPANCIES)
def test_neighbours_move_user_mean_by_its_sensitivity(name: str) -> None:
    counts = OCCUPANCIES[name]
    v0, v1, scale, sens = _noiseless(counts)
    assert v1 - v0 == pytest.approx(U / len(counts), rel=1e-12)
    assert sens >= v1 - v0 and sens == pytest.approx(v1 - v0, rel=1e-12)
    assert scale >= sens / EPS and scale == pytest.approx(sens / EPS, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", OCCUPANCIES)
def test_audit_bounds_user_mean_loss_by_eps(name: str) -> None:

    def check() -> list[str]:
        result = _loss(OCCUPANCIES[name], N, 1.0)
        print(f"\naudit user_mean [{name}]: loss >= {result.bound:.4f} (eps {EPS})")
        return [] if 0.85 * EPS < result.bound <= EPS else [str(result)]

    fails_only_twice(check)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "variant", "factor"),
    [
        ("audit grid", "noise halved", 0.5),
        # U/(L+1) instead of U/L: the scale times L/(L+1)
        ("two units", "sensitivity U/(L+1)", 2.0 / 3.0),
    ],
)
def test_audit_catches_broken_user_mean(name: str, variant: str, factor: float) -> None:

    def check() -> list[str]:
        result = _loss(OCCUPANCIES[name], N_BROKEN, factor)
        print(f"\naudit broken user_mean [{name}, {variant}]: loss >= {result.bound:.4f}")
        return [] if result.bound > EPS else [f"{variant}: {result}"]

    fails_only_twice(check)
