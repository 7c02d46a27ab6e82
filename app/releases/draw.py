"""The draw step of a release: every grid's statistics on its kept records.

Private choices run per grid; the Laplace noise of all grids is drawn batched by
scale (docs/math.md §9.4.7). The plan (``app.releases.planning``) has fixed each
user's kept count per grid from public occupancy; nothing here reads the ledger.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import h3
import numpy as np

from app import core
from app.answers.body import answer_body
from app.answers.epsilon import EpsilonAmount
from app.datasets.grid_store import GridArrays
from app.datasets.models import Dataset, Grid
from app.datasets.windows import privacy_unit
from app.errors import InvalidRequest
from app.ingest.timeslots import datetime_to_us, format_local, get_zone
from app.releases.planning import Occupancy, SlotPlan
from app.releases.schemas import ReleaseIn


def mechanism_options(body: ReleaseIn) -> dict[str, Any]:
    """The options every grid's mechanism runs with (auto's objective)."""
    if body.mechanism == "auto":
        return {"objective": body.objective}
    if body.objective != "accuracy":
        raise InvalidRequest("objective applies to mechanism auto only; drop it or use auto")
    return {}


def statistic_eps(plan: SlotPlan, n_statistics: int) -> EpsilonAmount:
    """Each statistic's share of the per-grid epsilon (the whole of it, or half)."""
    if n_statistics == 1:
        return plan.eps
    return EpsilonAmount(plan.eps.charged / n_statistics, plan.eps.used / n_statistics)


def local_time(dataset: Dataset, when: datetime) -> str:
    return _local_text(dataset.timezone, when)


@functools.lru_cache(maxsize=1024)
def _local_text(timezone: str, when: datetime) -> str:
    """A slot start in the dataset's local time (a span's 10⁵ grids share a few slots)."""
    return format_local(datetime_to_us(when), get_zone(timezone))


def grid_head(dataset: Dataset, grid: Grid, caps: np.ndarray) -> dict[str, Any]:
    """A released grid's fields before its statistics."""
    return {
        "grid_id": grid.public_id,
        "h3_cell": grid.h3_cell,
        "h3_resolution": h3.get_resolution(grid.h3_cell),
        "slot_start": local_time(dataset, grid.slot_start),
        "n_users": int(caps.size),
        "n_users_suppressed": int(np.count_nonzero(caps == 0)),
    }


def draw_grids(
    dataset: Dataset,
    grids: Sequence[Grid],
    arrays: Sequence[GridArrays],
    occ: Occupancy,
    body: ReleaseIn,
    plan: SlotPlan,
    release_id: str,
    epoch: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each released grid's answer entry, and who was kept where (admins only)."""
    out, kept = [], {}
    eps = statistic_eps(plan, len(body.statistics))
    mech_opts = mechanism_options(body)
    options = {"release": release_id, **mech_opts}
    U = dataset.value_bound
    unit = privacy_unit(dataset)
    chosen: list[int] = []
    caps_of: list[np.ndarray] = []
    for i in range(len(grids)):
        caps = plan.caps(occ, i)
        if caps.any():  # else every user exhausted (exclude): withheld, nobody charged
            chosen.append(i)
            caps_of.append(caps)
    try:
        started = core.start_many(
            body.statistics,
            [arrays[i] for i in chosen],
            caps_of,
            U,
            eps.used,
            body.mechanism,
            **mech_opts,
        )
    except core.GridError as exc:
        bad = grids[chosen[exc.index]].public_id
        raise InvalidRequest(f"cannot release grid {bad}: {exc}") from exc
    except ValueError as exc:
        raise InvalidRequest(f"cannot release these grids: {exc}") from exc
    pending: list[tuple[dict[str, Any], str, Grid, core.PendingRelease]] = []
    for i, caps, grid_started in zip(chosen, caps_of, started, strict=True):
        grid, grid_arrays = grids[i], arrays[i]
        entry = grid_head(dataset, grid, caps)
        pending += [(entry, s, grid, p) for s, p in zip(body.statistics, grid_started, strict=True)]
        out.append(entry)
        users = grid_arrays.user_ids[caps > 0].tolist()
        kept[grid.public_id] = {  # user ids as int keys: stored as strings (OPT_NON_STR_KEYS)
            "version": grid_arrays.version,
            "users": dict(zip(users, caps[caps > 0].tolist(), strict=True)),
        }
    releases = core.finish_releases([p[3] for p in pending])
    for (entry, stat, grid, _), release in zip(pending, releases, strict=True):
        entry[stat] = answer_body(
            grid, stat, body.mechanism, eps, options, release, epoch, privacy_unit=unit
        )
    return out, kept
