"""Statistical privacy audit of per-cell epsilon (docs/math.md §6.10).

Two cells share ten units; the plan for intervals gives them different epsilons (their
needs differ) and charges each shared unit the sum, exactly ``max_user_cost``. Neighbours
move one shared unit's records from 0 to ``U`` in both cells (everyone else at ``U/2``);
each cell's ``user_mean`` is released through the production path at the plan's epsilon
with OpenDP's Laplace (:class:`tests.security.audit_lib.BulkOpenDPNoise`), and the joint
privacy loss is bounded from below (Clopper–Pearson, :func:`audit_lib.loss_lower_bound`)
on the pair's log-likelihood ratio statistic. It must stay below the unit's charge and
reach most of it; a broken copy of the weighting that does not deduct what a unit has
paid must be caught above ``max_user_cost``. Each check fails only when two independent
samples both fail it (:mod:`tests.unseeded`).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from app import core
from app.core import GridData
from app.releases import per_cell
from app.releases.interval_plan import plan_for_intervals
from app.releases.per_cell import WidthRule
from app.releases.planning import Occupancy, SlotPlan
from tests.security import audit_lib as audit
from tests.unit.test_per_cell import _broken_weights
from tests.unseeded import fails_only_twice

U = 30.0
CAP = Decimal("2")
N = 100_000
N_BROKEN = 30_000
ALPHA_EACH = 0.01 / 2
SHARED = 100  # the unit whose records move


def _occupancy() -> Occupancy:
    shared = list(range(SHARED, SHARED + 10))
    a = np.sort(np.array(list(range(30)) + shared, dtype=np.int64))
    b = np.sort(np.array(list(range(200, 215)) + shared, dtype=np.int64))
    return Occupancy.of([a, b], [np.ones(40, np.int64), np.ones(25, np.int64)])


def _plan(occ: Occupancy) -> SlotPlan:
    rule = WidthRule(("user_mean",), U, "auto", {"objective": "interval"}, 0.2 * U)
    return plan_for_intervals(
        occ, None, U, eps=None, cost_cap=CAP, max_epsilon=Decimal(10), n_statistics=1,
        useful_width=0.2 * U, rule=rule,
    )  # fmt: skip


def _grid(occ: Occupancy, i: int, heavy: float) -> GridData:
    users = occ.user[occ.bounds[i] : occ.bounds[i + 1]].tolist()
    return GridData.from_user_values([[heavy if u == SHARED else U / 2] for u in users])


def _loss(plan: SlotPlan, occ: Occupancy, n: int) -> tuple[audit.AuditResult, Decimal]:
    """The joint loss bound of the two cells' releases, and the shared unit's charge."""
    assert (plan.kept == occ.count).all(), "the audited plan keeps every unit"
    eps = [plan.grid_eps(i) for i in range(2)]
    located = []
    for i in range(2):
        got = []
        for heavy in (0.0, U):
            rec = audit.RecordingNoise()
            core.release("user_mean", _grid(occ, i, heavy), U, eps[i].used, "auto", noise=rec)
            got.append((rec.value, rec.scale))
        (v0, b0), (v1, b1) = got
        assert b0 == b1, "the scale must depend on public counts only"
        located.append((v0, v1, b0))
    samples = []
    for heavy in (0.0, U):
        llr = np.zeros(n)
        for i, (v0, v1, b) in enumerate(located):
            noise: Any = audit.BulkOpenDPNoise(n)
            x = np.asarray(core.release("user_mean", _grid(occ, i, heavy), U, eps[i].used,
                                        "auto", noise=noise).estimate)  # fmt: skip
            llr += (np.abs(x - v0) - np.abs(x - v1)) / b
        samples.append(llr)
    top = sum(e.used for e in eps)
    edges = np.linspace(-top, top, 41)
    edges[0], edges[-1] = -0.999 * top, 0.999 * top  # the extreme atoms in the end events
    charge = sum((e.charged for e in eps), Decimal(0))
    return audit.loss_lower_bound(samples[0], samples[1], edges, ALPHA_EACH), charge


def test_the_audited_plan_gives_the_cells_different_epsilons() -> None:
    occ = _occupancy()
    plan = _plan(occ)
    assert plan.weights is not None and plan.weights[0] != plan.weights[1]
    assert plan.grid_eps(0).charged + plan.grid_eps(1).charged <= CAP


@pytest.mark.slow
def test_audit_bounds_the_shared_units_loss_by_its_charge() -> None:
    occ = _occupancy()
    plan = _plan(occ)

    def check() -> list[str]:
        result, charge = _loss(plan, occ, N)
        print(f"\naudit per-cell: loss >= {result.bound:.4f} (charge {charge}, cap {CAP})")
        ok = 0.85 * float(charge) < result.bound <= float(charge) <= float(CAP)
        return [] if ok else [str(result)]

    fails_only_twice(check)


@pytest.mark.slow
def test_audit_catches_a_copy_that_overspends_a_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    broken: Callable[..., tuple[np.ndarray, np.ndarray]] = _broken_weights
    monkeypatch.setattr(per_cell, "per_cell_weights", broken)
    monkeypatch.setattr(per_cell, "_check_cost", lambda plan, Q: None)
    occ = _occupancy()
    plan = _plan(occ)

    def check() -> list[str]:
        result, charge = _loss(plan, occ, N_BROKEN)
        print(f"\naudit broken per-cell: loss >= {result.bound:.4f} (charge {charge})")
        return [] if result.bound > float(CAP) else [str(result)]

    fails_only_twice(check)
