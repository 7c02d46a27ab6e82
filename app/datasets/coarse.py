"""Coarser grids on demand: H3 parent cells and longer slots aligned to local midnight
(:func:`app.time.slots.slot_start_us`).

A coarser grid's occupancy and snapshot come from the stored records of the grids it covers and
are stored like any grid's, so the grid cache serves it by version (``coarse_repository``)."""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import h3
import numpy as np
from sqlalchemy.orm import Session

from app.datasets.coarse_repository import CoarseGridRepository, CoarseRow, FineGrid
from app.datasets.grid_store import summarise_grids
from app.datasets.models import Dataset, Grid
from app.datasets.repository import GridRepository, RecordArrays, copy_records, snapshot_records
from app.kit.errors import InvalidRequest
from app.time.slots import (
    datetime_to_us,
    get_zone,
    slot_end_bound_us,
    slot_start_us,
    us_to_datetime,
)

__all__ = ["GridLevel", "coarse_grids", "ensure_level", "grid_level", "refresh_after_upload"]

#: A slot of ``m`` minutes lasts at most this much longer on a daylight-saving day.
_DST_SLACK = timedelta(hours=2)
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class GridLevel:
    """A grid size coarser than the dataset's own (in cell, slot length or both)."""

    h3_resolution: int
    slot_minutes: int


def grid_level(
    dataset: Dataset, h3_resolution: int | None, slot_minutes: int | None
) -> GridLevel | None:
    """The requested level, ``None`` for the dataset's own grids; 400 if not coarser."""
    res = dataset.h3_resolution if h3_resolution is None else h3_resolution
    minutes = dataset.timeslot_minutes if slot_minutes is None else slot_minutes
    if not 0 <= res <= dataset.h3_resolution:
        raise InvalidRequest(
            f"h3_resolution must be between 0 and the dataset's {dataset.h3_resolution}"
        )
    if minutes < 1 or minutes % dataset.timeslot_minutes or 1440 % minutes:
        raise InvalidRequest(
            f"slot_minutes must be a multiple of the dataset's {dataset.timeslot_minutes} "
            "that divides 1440"
        )
    if res == dataset.h3_resolution and minutes == dataset.timeslot_minutes:
        return None
    return GridLevel(res, minutes)


def _keys(fine: list[FineGrid], dataset: Dataset, level: GridLevel) -> list[tuple[str, int]]:
    """``(parent cell, coarser slot start µs)`` of each grid."""
    parents: dict[str, str] = {}
    for g in fine:
        if g.h3_cell not in parents:
            parents[g.h3_cell] = h3.cell_to_parent(g.h3_cell, level.h3_resolution)
    starts = np.array([datetime_to_us(g.slot_start) for g in fine], dtype=np.int64)
    slots = slot_start_us(starts, get_zone(dataset.timezone), level.slot_minutes).tolist()
    return [(parents[g.h3_cell], s) for g, s in zip(fine, slots, strict=True)]


def _build(
    repo: CoarseGridRepository, dataset: Dataset, groups: dict[tuple[str, int], list[FineGrid]]
) -> dict[tuple[str, int], CoarseRow]:
    """Occupancy and snapshot of each coarser grid, one coarser slot at a time."""
    fine = [g for v in groups.values() for g in v]
    users = GridRepository(repo.session).snapshot_users([g.id for g in fine])
    starts = np.array([datetime_to_us(g.slot_start) for g in fine], dtype=np.int64)
    ends = slot_end_bound_us(starts, get_zone(dataset.timezone), dataset.timeslot_minutes)
    end_of = {g.id: int(e) for g, e in zip(fine, ends.tolist(), strict=True)}
    by_slot: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for key in groups:
        by_slot[key[1]].append(key)
    out = {}
    for keys in by_slot.values():
        index = {g.id: i for i, k in enumerate(keys) for g in groups[k]}
        part = [g for k in keys for g in groups[k]]
        known = all(users.get(g.id, (None,))[0] == g.version for g in part)
        start = min(datetime_to_us(g.slot_start) for g in part)
        if dataset.raw_kept_from is not None and start < datetime_to_us(dataset.raw_kept_from):
            rec = _from_snapshots(repo, part)  # raw records dropped (retention)
        else:
            rec = copy_records(
                repo.session,
                dataset.id,
                list(index),
                np.unique(np.concatenate([users[g.id][1] for g in part])).tolist()
                if known
                else None,
                start,
                max(end_of[g.id] for g in part),
            )
        if rec.grid_ids.size == 0:
            continue
        lookup = np.array(sorted(index), dtype=np.int64)
        code_of = np.array([index[int(g)] for g in lookup], dtype=np.int64)
        codes = code_of[np.searchsorted(lookup, rec.grid_ids)]
        order = np.lexsort((rec.ts_us, rec.user_ids, codes))  # (coarser grid, user, time)
        for s in summarise_grids(codes[order], rec.user_ids[order], rec.values[order]):
            key = keys[s.grid_id]
            out[key] = CoarseRow(
                h3_cell=key[0],
                slot_start=us_to_datetime(key[1]),
                public_id=secrets.token_urlsafe(12),
                n_users=s.n_users,
                n_records=s.n_records,
                max_user_records=s.max_user_records,
                version=sum(g.version for g in groups[key]),
                user_ids=s.user_ids,
                counts=s.counts,
                values=s.values,
            )
    return out


def _from_snapshots(repo: CoarseGridRepository, part: list[FineGrid]) -> RecordArrays:
    """The records of grids whose raw records were dropped, from their snapshots, each user's
    values in (slot, cell) order of the grids (docs/math.md: a cap's order depends on that user's
    records only)."""
    ordered = sorted(part, key=lambda g: (g.slot_start, g.h3_cell))
    snaps = {r[0]: r for r in GridRepository(repo.session).snapshot_rows([g.id for g in ordered])}
    found = (snaps[g.id] for g in ordered if g.id in snaps)
    return snapshot_records((gid, users, counts, vals) for gid, _, users, counts, vals in found)


def coarse_grids(
    session: Session,
    dataset: Dataset,
    level: GridLevel,
    slot: datetime | None = None,
    until: datetime | None = None,
) -> list[Grid]:
    """The coarser grids of ``level`` (those starting at ``slot``, or in ``[slot, until)``), made
    or refreshed as needed, in (slot, cell) order."""
    repo = CoarseGridRepository(session)
    repo.share_lock(dataset.id)
    length = timedelta(minutes=level.slot_minutes)
    if slot is None:
        lo = hi = None
    else:
        lo, hi = slot, (slot + length if until is None else until)
    # a fine grid of the last slot starts before that slot's start + its length
    fine_end = None if hi is None else hi + (length if until else timedelta(0)) + _DST_SLACK
    fine = repo.fine_grids(dataset.id, lo, fine_end)
    first = None if slot is None else datetime_to_us(slot)
    last = first if until is None or first is None else datetime_to_us(until) - 1
    groups: dict[tuple[str, int], list[FineGrid]] = defaultdict(list)
    for g, key in zip(fine, _keys(fine, dataset, level), strict=True):
        if first is None or (last is not None and first <= key[1] <= last):
            groups[key].append(g)
    stored = _stored(repo, dataset.id, level, lo, hi)
    stale = {
        k: v
        for k, v in groups.items()
        if k not in stored or stored[k].version != sum(g.version for g in v)
    }
    if stale:
        built = _build(repo, dataset, stale)
        repo.insert_missing(
            dataset.id, level.slot_minutes, [r for k, r in built.items() if k not in stored]
        )
        for k, r in built.items():
            if k in stored:
                repo.refresh(stored[k].id, r)
        stored = _stored(repo, dataset.id, level, lo, hi)
        repo.write_snapshots([(stored[k].id, r) for k, r in built.items()])
    return sorted(
        (stored[k] for k in groups if k in stored), key=lambda g: (g.slot_start, g.h3_cell)
    )


def ensure_level(session: Session, dataset: Dataset, level: GridLevel) -> None:
    """Make the coarser grids of ``level`` over every slot that has none stored yet, so a listing
    pages the stored ones by index; builders of a level take turns (an advisory lock)."""
    repo = GridRepository(session)
    zone = get_zone(dataset.timezone)

    def missing() -> list[int]:
        fine = repo.slot_starts(dataset.id, 0)
        if not fine:
            return []
        starts = np.array([datetime_to_us(t) for t in fine], dtype=np.int64)
        wanted = set(slot_start_us(starts, zone, level.slot_minutes).tolist())
        stored = repo.slot_starts(dataset.id, level.slot_minutes, level.h3_resolution)
        return sorted(wanted - {datetime_to_us(t) for t in stored})

    if not missing():
        return
    CoarseGridRepository(session).build_lock(dataset.id, level.h3_resolution, level.slot_minutes)
    for start in missing():
        coarse_grids(session, dataset, level, us_to_datetime(start))


def _stored(
    repo: CoarseGridRepository,
    dataset_id: int,
    level: GridLevel,
    lo: datetime | None,
    hi: datetime | None,
) -> dict[tuple[str, int], Grid]:
    return {
        (g.h3_cell, datetime_to_us(g.slot_start)): g
        for g in repo.coarse_grids(dataset_id, level.slot_minutes, lo, hi)
        if h3.get_resolution(g.h3_cell) == level.h3_resolution
    }


def refresh_after_upload(session: Session, dataset: Dataset, slots_us: Iterable[int]) -> None:
    """Bring the stored coarser grids over these slots up to date (an upload)."""
    slots = list(slots_us)
    if not slots:
        return
    repo = CoarseGridRepository(session)
    found = repo.coarse_starts(
        dataset.id, us_to_datetime(min(slots)) - _DAY, us_to_datetime(max(slots))
    )
    for minutes, res, start in sorted({(m, h3.get_resolution(c), s) for m, c, s in found}):
        coarse_grids(session, dataset, GridLevel(res, minutes), start)
