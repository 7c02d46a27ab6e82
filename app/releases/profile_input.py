"""A profile release's input (docs/math.md §6.8): each chosen date's grids of the profile's
time-of-day slots, pooled per (time-of-day slot, cell) over the dates, users as privacy
units (``app.releases.pooling``), then released at one resolution or as an adaptive
partition whose coarser cells pool the fine profile cells in memory.

Which dates, slots and cells pool together depends only on the request and on public
occupancy (which grids exist), so the partition and the plan stay public choices.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import h3
import numpy as np
from sqlalchemy.orm import Session

from app.datasets.grid_batch import GridColumns, load_grid_batch
from app.datasets.grid_store import SlotGrid
from app.kit.errors import NotFound
from app.releases.adaptive import AdaptiveGrids
from app.releases.inputs import ReleaseInput, adaptive_over, fixed_occupancy, make_input
from app.releases.pooling import arrays_of, pool, units_of
from app.releases.profiles import Profile
from app.releases.request import ReleaseRequest
from app.releases.slot import SpanGrids, grids_at
from app.time.slots import datetime_to_us


@dataclass(frozen=True)
class ProfileGrid:
    """A released grid of a profile: one cell and one time of day over the dates. Not
    stored as a grid (``id`` 0); ``slot_start`` is the slot's start on the first date, a
    key only; the answer shows ``time_of_day``."""

    id: int
    public_id: str
    h3_cell: str
    slot_start: datetime
    n_users: int  # privacy units
    version: int
    time_of_day: str
    slot: int  # the time-of-day slot, 0 .. slots-1


def _public_id(req: ReleaseRequest, slot: int, cell: str) -> str:
    """The same id for the same dataset, profile, slot length, time of day and cell."""
    assert req.profile is not None
    text = f"{req.dataset.id}|{req.profile.as_json()}|{req.slot_minutes}|{slot}|{cell}"
    return "p" + hashlib.sha256(text.encode()).hexdigest()[:31]  # PROFILE_CELL_ID


def _daily(session: Session, req: ReleaseRequest, profile: Profile) -> tuple[list, list, list]:
    """Every chosen date's grids in the profile's slots: the grids, their slot, their
    date's budget window (an index into ``profile.windows()``)."""
    window_of = profile.window_index()
    grids: list[SlotGrid] = []
    slots: list[int] = []
    windows: list[int] = []
    for day in profile.dates:
        lo, hi = profile.day_range(day)
        for g in grids_at(session, req.dataset, req.level, lo, hi):
            j = profile.slot_of(g.slot_start, day)
            if j is not None:
                grids.append(g)
                slots.append(j)
                windows.append(window_of[day])
    return grids, slots, windows


def _grids(
    req: ReleaseRequest, profile: Profile, keys: list[tuple[int, str]], cols: GridColumns
) -> list[ProfileGrid]:
    step = timedelta(minutes=req.slot_minutes)
    sizes = cols.sizes.tolist()
    return [
        ProfileGrid(
            0,
            _public_id(req, j, cell),
            cell,
            profile.first_start + j * step,
            n,
            0,
            profile.time_of_day(j),
            j,
        )
        for (j, cell), n in zip(keys, sizes, strict=True)
    ]


def profile_input(session: Session, req: ReleaseRequest) -> ReleaseInput:
    profile = req.profile
    assert profile is not None
    dataset = req.dataset
    daily, slots, windows = _daily(session, req, profile)
    if not daily:
        raise NotFound(
            f"no grid of dataset {dataset.id} in the profile's slots from "
            f"{profile.time_of_day(0)} on any chosen date from {profile.date_from} to "
            f"{profile.date_to} ({dataset.timezone})"
        )
    keys = sorted({(j, g.h3_cell) for j, g in zip(slots, daily, strict=True)})
    index = {k: i for i, k in enumerate(keys)}
    target = np.array([index[(j, g.h3_cell)] for j, g in zip(slots, daily, strict=True)])
    # read grouped by pooled grid, in date order within (a stable sort): the pooled grids'
    # records then lie in the order pooling puts them, and need no copy (app.releases.pooling)
    by_target = np.argsort(target, kind="stable")
    batch = load_grid_batch(session, [daily[i] for i in by_target.tolist()])
    versions = np.empty(len(daily), dtype=np.int64)
    versions[by_target] = [a.version for a in batch.arrays]
    sources = tuple(zip([g.id for g in daily], versions.tolist(), strict=True))
    windowed = dataset.budget_window != "none"
    window = np.array(windows, dtype=np.int64)[by_target] if windowed else None
    units, subjects = units_of(batch.columns, window)
    cols = pool(batch.columns, target[by_target], units, len(keys))
    del batch, units  # the pooled columns are what is released (2·10⁷ records: 160 MB)
    grids = _grids(req, profile, keys, cols)
    end = profile.first_start + req.slots * timedelta(minutes=req.slot_minutes)
    span = SpanGrids(profile.first_start, end, req.slots, req.level, req.h3_resolution,
                     req.slot_minutes, grids)  # fmt: skip
    extra: dict[str, Any] = {
        "sources": sources, "windows": profile.windows(), "subjects": subjects,
    }  # fmt: skip
    if req.partition == "fixed":
        covered = [g.n_users >= req.min_users for g in grids]
        kept = [i for i, c in enumerate(covered) if c]
        arrays = arrays_of(cols)
        occ = fixed_occupancy(cols, covered)
        joined = cols if len(kept) == len(covered) else None  # no second copy of 2·10⁷ values
        return make_input(
            dataset, span, [grids[i] for i in kept], [arrays[i] for i in kept], covered, cols,
            occ, joined, **extra,
        )  # fmt: skip

    def chooser(released: dict[tuple[int, str], int]) -> AdaptiveGrids:
        return _pooled_partition(req, profile, grids, cols, released)

    return adaptive_over(req, span, cols, chooser, extra)


def _pooled_partition(
    req: ReleaseRequest,
    profile: Profile,
    fine: list[ProfileGrid],
    cols: GridColumns,
    released: dict[tuple[int, str], int],
) -> AdaptiveGrids:
    """The released cells as profile grids: each fine profile cell pooled into its
    released ancestor (or itself) of the same time of day; (slot, resolution, cell) order."""
    slot_of = {datetime_to_us(g.slot_start): g.slot for g in fine}
    keys = sorted(
        {(slot_of[s], cell) for s, cell in released},
        key=lambda k: (k[0], -h3.get_resolution(k[1]), k[1]),
    )
    index = {k: i for i, k in enumerate(keys)}
    target = np.full(len(fine), -1, dtype=np.int64)
    for i, g in enumerate(fine):
        us = datetime_to_us(g.slot_start)
        res = h3.get_resolution(g.h3_cell)
        for r in range(res, req.coarsest_resolution - 1, -1):
            cell = g.h3_cell if r == res else h3.cell_to_parent(g.h3_cell, r)
            if released.get((us, cell)) == r:
                target[i] = index[(slot_of[us], cell)]
                break
    pooled = pool(cols, target, None, len(keys))
    grids = _grids(req, profile, keys, pooled)
    if any(g.n_users < req.min_users for g in grids):
        raise RuntimeError("the adaptive partition's grids differ from its cells")
    return AdaptiveGrids(list(grids), arrays_of(pooled))
