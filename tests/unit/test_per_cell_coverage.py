"""The ci95 of per-cell releases (docs/math.md §6.10) holds the truth at least 95% of the
time in every cell, on an adversarial occupancy: travellers in most cells, cells at
epsilons of 1 to 42 quanta, a quarter to a third of the units of the cheap cells suppressed, and
the travellers' records all at ``U`` while the others lie in ``[0, U/4]`` (so each
suppressed unit's imputed ``U/2`` misses its mean by the most it can, ``U/2``).

Exact part (``user_mean`` has no private step): each cell's row as the release's draw
makes it (at the cell's own epsilon and kept set), its noiseless estimate within its
bias bound of the truth and its exact coverage ``P(|ν̂ - ν| <= b ln 20 + B)`` from the
Laplace CDF at least 0.95. Statistical part: the release's draw (``draw_grids``, OpenDP's
noise) repeated, each cell's misses against Binomial(n, 0.05) (one-sided, Bonferroni over
the cells, α = 1e-4 on each of up to two samples: ``tests.unseeded``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import h3
import numpy as np
import pytest
from scipy import stats

from app import core
from app.core.data.results import LN20
from app.datasets.grid_batch import GridColumns
from app.datasets.grid_store import GridArrays, GridRow
from app.releases.draw import draw_grids, statistic_eps
from app.releases.interval_plan import plan_for_intervals
from app.releases.per_cell import WidthRule
from app.releases.planning import Occupancy, SlotPlan
from tests.unseeded import laws_hold

U = 30.0
CELLS = [h3.latlng_to_cell(30.27 + 0.01 * i, -97.74, 8) for i in range(10)]


def _grids(seed: int = 0, units: int = 80) -> tuple[list[GridArrays], Occupancy]:
    """Ten cells of 12-45 units plus most of 20 travellers (values ``U``; others in
    ``[0, U/4]``), 1-11 records per unit and cell."""
    rng = np.random.default_rng(seed)
    travellers = rng.permutation(units)[: units // 4]
    arrays = []
    for g in range(len(CELLS)):
        size = int(rng.integers(12, 45))
        here = set(rng.choice(units, size=size, replace=False).tolist())
        here |= set(travellers[rng.random(travellers.size) < 0.7].tolist())
        who = np.array(sorted(here), dtype=np.int64)
        counts = rng.integers(1, 12, size=who.size).astype(np.int64)
        values = np.concatenate([
            np.full(c, U) if u in travellers else rng.uniform(0, U / 4, size=c)
            for u, c in zip(who.tolist(), counts.tolist(), strict=True)
        ])  # fmt: skip
        arrays.append(GridArrays(g + 1, 1, who, counts, values))
    return arrays, Occupancy.of([a.user_ids for a in arrays], [a.counts for a in arrays])


def _plan(occ: Occupancy, statistics: tuple[str, ...]) -> SlotPlan:
    rule = WidthRule(statistics, U, "auto", {"objective": "interval"}, 0.2 * U)
    return plan_for_intervals(
        occ, None, U, eps=None, cost_cap=Decimal(2), max_epsilon=Decimal(10),
        n_statistics=len(statistics), useful_width=0.2 * U, rule=rule,
    )  # fmt: skip


def _truths(arrays: list[GridArrays], statistic: str) -> list[float]:
    if statistic == "mean":
        return [float(np.mean(a.values)) for a in arrays]
    return [
        float(np.mean([s.mean() for s in np.split(a.values, np.cumsum(a.counts)[:-1])]))
        for a in arrays
    ]


def _is_adversarial(occ: Occupancy, plan: SlotPlan) -> None:
    """The case the module docstring describes (else the test would test less)."""
    assert plan.weights is not None and len(set(plan.weights.tolist())) >= 3
    assert int(plan.weights.max()) >= 10 * int(plan.weights[plan.weights > 0].min())
    suppressed = [int((plan.caps(occ, i) == 0).sum()) for i in range(len(CELLS))]
    assert sum(s >= 6 for s in suppressed) >= 4


def test_each_cells_noiseless_user_mean_is_within_its_bias_and_covered_exactly() -> None:
    arrays, occ = _grids()
    plan = _plan(occ, ("user_mean",))
    _is_adversarial(occ, plan)
    truth = _truths(arrays, "user_mean")
    for i, a in enumerate(arrays):
        eps = statistic_eps(plan, 1, i)
        assert eps.charged == plan.eps.charged * int(plan.weights[i])
        row = core.start_many(["user_mean"], [a], [plan.caps(occ, i)], U, eps.used)
        miss = abs(row.value[0] - truth[i])
        b, bias = row.scale[0], row.bias[0]
        assert miss <= bias, f"cell {i}: off by {miss} > bias bound {bias}"
        half = b * LN20 + bias  # P(|value + Lap(b) - ν| <= half), exactly
        cover = stats.laplace.cdf(half - miss, scale=b) - stats.laplace.cdf(-half - miss, scale=b)
        assert cover >= 0.95 - 1e-12, f"cell {i}: exact coverage {cover}"


def _draw(arrays: list[GridArrays], occ: Occupancy, plan: SlotPlan, stats_: tuple[str, ...]
          ) -> list[dict[str, Any]]:  # fmt: skip
    dataset = SimpleNamespace(timezone="UTC", value_bound=U, value_unit="m/s", budget_window="none")
    req = SimpleNamespace(
        options={"objective": "interval"}, n_statistics=len(stats_), statistics=stats_,
        mechanism="auto",
    )  # fmt: skip
    slot = datetime(2024, 3, 5, 8, tzinfo=UTC)
    grids = [GridRow(a.grid_id, f"g{a.grid_id}", c, slot, a.user_ids.size, 1)
             for a, c in zip(arrays, CELLS, strict=True)]  # fmt: skip
    out, _ = draw_grids(dataset, grids, arrays, occ, req, plan, "r", 0, GridColumns.of(arrays))
    return out


@pytest.mark.parametrize(
    ("statistics", "draws"),
    [(("user_mean",), 100), (("mean",), 40),
     pytest.param(("user_mean",), 4000, marks=pytest.mark.slow)],
)  # fmt: skip
def test_per_cell_release_ci95_holds_each_cells_truth_at_95_percent(
    statistics: tuple[str, ...], draws: int
) -> None:
    arrays, occ = _grids()
    plan = _plan(occ, statistics)
    assert plan.weights is not None and len(set(plan.weights.tolist())) >= 2
    if statistics == ("user_mean",):
        _is_adversarial(occ, plan)
    truth = _truths(arrays, statistics[0])
    first = _draw(arrays, occ, plan, statistics)
    cells = [int(g["grid_id"][1:]) - 1 for g in first]
    for g, i in zip(first, cells, strict=True):  # each cell drawn at its own epsilon
        answer, eps = g[statistics[0]], statistic_eps(plan, 1, i)
        assert Decimal(str(answer["epsilon"])) == eps.charged
        if statistics == ("user_mean",):  # its noise scaled to it, not to the quantum
            low = answer["sensitivity"] / eps.used
            assert low <= answer["noise_scale"] <= low * (1 + 1e-9)

    def p_values() -> dict[str, float]:
        misses = np.zeros(len(cells), dtype=np.int64)
        for _ in range(draws):
            for j, g in enumerate(_draw(arrays, occ, plan, statistics)):
                lo, hi = g[statistics[0]]["ci95"]
                misses[j] += not lo <= truth[cells[j]] <= hi
        out = {f"cell {i}: {m}/{draws} missed": float(stats.binom.sf(m - 1, draws, 0.05))
               for i, m in zip(cells, misses.tolist(), strict=True)}  # fmt: skip
        n, m = draws * len(cells), int(misses.sum())
        out[f"all cells: {m}/{n} missed"] = float(stats.binom.sf(m - 1, n, 0.05))
        return out

    laws_hold(p_values)
