"""The draw step of a release: every grid's statistics on its kept records.

Private choices run per grid (auto's window path in arrays); the Laplace noise of all
grids is drawn batched by scale (docs/math.md §9.4.7); the answers are built from the
batch's columns. The plan (``app.releases.planning``) has fixed each user's kept count
per grid from public occupancy; nothing here reads the ledger.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import h3
import numpy as np

from app import core
from app.answers.body import answer_bodies
from app.answers.epsilon import EpsilonAmount, equal_share
from app.core.data.joined import JoinedGrids
from app.datasets.grid_batch import GridColumns
from app.datasets.grid_store import GridArrays, SlotGrid
from app.datasets.models import Dataset
from app.kit.errors import InvalidRequest
from app.releases.kept_sets import KeptSets
from app.releases.planning import Occupancy, SlotPlan
from app.releases.request import ReleaseRequest
from app.time.budget_windows import privacy_unit
from app.time.slots import datetime_to_us, format_local, get_zone


def statistic_eps(plan: SlotPlan, n_statistics: int, grid: int = 0) -> EpsilonAmount:
    """Each statistic's equal share of grid ``grid``'s epsilon (:func:`equal_share`; the
    same for every grid unless the plan has per-cell weights)."""
    return equal_share(plan.grid_eps(grid), n_statistics)


def by_epsilon(plan: SlotPlan, grids: list[int]) -> list[list[int]]:
    """``grids`` (positions) grouped by their epsilon, each group in order: one group
    unless the plan has per-cell weights."""
    if plan.weights is None:
        return [grids]
    groups: dict[int, list[int]] = {}
    for i in grids:
        groups.setdefault(int(plan.weights[i]), []).append(i)
    return list(groups.values())


def local_time(dataset: Dataset, when: datetime) -> str:
    return _local_text(dataset.timezone, when)


@functools.lru_cache(maxsize=1024)
def _local_text(timezone: str, when: datetime) -> str:
    """A slot start in the dataset's local time (a span's 10⁵ grids share a few slots)."""
    return format_local(datetime_to_us(when), get_zone(timezone))


def grid_head(dataset: Dataset, grid: SlotGrid, n_users: int, n_suppressed: int) -> dict[str, Any]:
    """A released grid's fields before its statistics (a profile's grid: its time of day)."""
    time_of_day = getattr(grid, "time_of_day", None)
    return {
        "grid_id": grid.public_id,
        "h3_cell": grid.h3_cell,
        "h3_resolution": h3.get_resolution(grid.h3_cell),
        "slot_start": time_of_day or local_time(dataset, grid.slot_start),
        "n_users": n_users,
        "n_users_suppressed": n_suppressed,
    }


def kept_per_grid(occ: Occupancy, plan: SlotPlan) -> tuple[np.ndarray, np.ndarray]:
    """Per grid of ``occ``: its users, and those the plan keeps (Γ > 0)."""
    n_grids = occ.bounds.size - 1
    users = np.diff(occ.bounds)
    kept = np.bincount(occ.grid[plan.kept > 0], minlength=n_grids)
    return users, kept


def draw_grids(
    dataset: Dataset,
    grids: Sequence[SlotGrid],
    arrays: Sequence[GridArrays],
    occ: Occupancy,
    req: ReleaseRequest,
    plan: SlotPlan,
    release_id: str,
    epoch: int,
    columns: GridColumns,
) -> tuple[list[dict[str, Any]], KeptSets]:
    """Each released grid's answer entry, and who was kept where (admins only). A grid
    where the plan keeps nobody (every user exhausted, ``exclude``) is withheld and
    charges nobody. ``columns``: the grids' arrays joined (``pairs`` are ``occ.bounds``)."""
    mech_opts = req.options
    n_users, n_kept = kept_per_grid(occ, plan)
    chosen = np.flatnonzero(n_kept > 0).tolist()
    if not np.array_equal(columns.pairs, occ.bounds):
        raise ValueError("the columns are not the occupancy's grids")
    joined = JoinedGrids(columns.counts, plan.kept, columns.values, columns.pairs, columns.records)
    S = req.n_statistics
    answers: dict[int, list[dict[str, Any]]] = {}
    for group in by_epsilon(plan, chosen):
        if not group:
            continue
        eps = statistic_eps(plan, S, group[0])
        try:
            started = core.start_many(
                list(req.statistics),
                [arrays[i] for i in group],
                [plan.caps(occ, i) for i in group],
                dataset.value_bound,
                eps.used,
                req.mechanism,
                joined=joined if len(group) == joined.n_grids else joined.take(group),
                **mech_opts,
            )
        except core.GridError as exc:
            bad = grids[group[exc.index]].public_id
            raise InvalidRequest(f"cannot release grid {bad}: {exc}") from exc
        except ValueError as exc:
            raise InvalidRequest(f"cannot release these grids: {exc}") from exc
        rows = core.finish_batch(started)
        bodies = answer_bodies(
            rows,
            [grids[i].public_id for i in group for _ in range(S)],
            req.mechanism,
            eps,
            {"release": release_id, **mech_opts},
            epoch,
            privacy_unit=privacy_unit(dataset),
            unit=dataset.value_unit,
        )
        answers.update({i: bodies[j * S : (j + 1) * S] for j, i in enumerate(group)})
    grid_ids = [grids[i].public_id for i in chosen]
    out = []
    for i, users, kept in zip(
        chosen, n_users[chosen].tolist(), n_kept[chosen].tolist(), strict=True
    ):
        entry = grid_head(dataset, grids[i], users, users - kept)
        for s, stat in enumerate(req.statistics):
            entry[stat] = answers[i][s]
        out.append(entry)
    versions = [arrays[i].version for i in chosen]
    return out, _kept_sets(grid_ids, versions, occ, plan, n_kept)


def _kept_sets(
    grid_ids: list[str],
    versions: list[int],
    occ: Occupancy,
    plan: SlotPlan,
    n_kept: np.ndarray,
) -> KeptSets:
    """The released grids' kept users (a profile's: budget subjects) and Γ: the pairs with
    Γ > 0, grid by grid (the released grids are those with such a pair, in the
    occupancy's order)."""
    keep = plan.kept > 0
    bounds = np.zeros(len(grid_ids) + 1, dtype=np.int64)
    np.cumsum(n_kept[n_kept > 0], out=bounds[1:])
    return KeptSets(grid_ids, versions, bounds, occ.subjects_of(occ.user[keep]), plan.kept[keep])
