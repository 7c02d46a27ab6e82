"""Datasets and grids: create, list, look up; the engine input of a grid."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

import h3
import numpy as np
from sqlalchemy.orm import Session

from app import budget
from app.datasets.coarse import coarse_grids, ensure_level, grid_level
from app.datasets.grid_batch import load_grid_snapshots
from app.datasets.grid_store import (
    GridArrays,
    clear_grid_cache,
    configure_grid_cache,
    load_grid_snapshot,
)
from app.datasets.models import Dataset, Grid
from app.datasets.partitions import ensure_dataset_partition
from app.datasets.repository import DatasetRepository, GridRepository
from app.datasets.schemas import DatasetCreate, DatasetDetail, DatasetOut, GridList, GridOut
from app.kit.errors import InvalidRequest, NotFound
from app.kit.ids import parse_path_id
from app.time.budget_windows import privacy_unit
from app.time.slots import (
    MAX_US,
    MIN_US,
    US,
    datetime_to_us,
    format_local,
    get_zone,
    localize_us,
    parse_timestamp,
    slot_start_us,
    us_to_datetime,
    utc_offsets_us,
)

__all__ = [  # re-exported for the query and release code
    "GridArrays", "clear_grid_cache", "configure_grid_cache", "load_grid_snapshot",
    "load_grid_snapshots",
]  # fmt: skip

_PUBLIC_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")


def create_dataset(session: Session, spec: DatasetCreate) -> Dataset:
    """Create a dataset (epoch 1, no records); its limits rounded down (``app.budget.limit``)."""
    limits = {
        name: budget.limit(getattr(spec, name))
        for name in ("budget_per_user", "max_epsilon_per_query")
    }
    for name, value in limits.items():
        if value <= 0:
            raise InvalidRequest(
                f"{name} must be at least {budget.QUANTUM} (the ledger's precision)"
            )
    fields = spec.model_dump(exclude=set(limits))
    dataset = DatasetRepository(session).add(Dataset(**fields, **limits, epoch=1))
    ensure_dataset_partition(session, dataset.id)
    return dataset


def list_datasets(session: Session) -> Sequence[Dataset]:
    return DatasetRepository(session).list_all()


def parse_dataset_id(dataset_id: int | str) -> int:
    """A dataset id from a path, or ``NotFound`` if malformed (``app.kit.ids``)."""
    return parse_path_id(dataset_id, "dataset")


def get_dataset(session: Session, dataset_id: int | str) -> Dataset:
    """The dataset, or ``NotFound`` (also for malformed or out-of-range ids)."""
    value = parse_dataset_id(dataset_id)
    dataset = DatasetRepository(session).get(value)
    if dataset is None:
        raise NotFound(f"no dataset {value}: GET /datasets lists the datasets")
    return dataset


def get_grid_by_public_id(session: Session, public_id: str) -> Grid:
    """The grid with this opaque id, or ``NotFound`` (also for malformed ids)."""
    if not isinstance(public_id, str) or not _PUBLIC_ID.fullmatch(public_id):
        raise no_grid(str(public_id))
    grid = GridRepository(session).by_public_id(public_id)
    if grid is None:
        raise no_grid(public_id)
    return grid


#: A profile release's cell id (``app.releases.profile_input``): a time of day pooled over
#: many dates, released once, never a stored grid (stored grids' ids are 16 characters).
PROFILE_CELL_ID = re.compile(r"p[0-9a-f]{31}")


def no_grid(public_id: str) -> NotFound:
    """The refusal of a grid id that names no grid, saying where grid ids come from."""
    if PROFILE_CELL_ID.fullmatch(public_id):
        return NotFound(
            f"no grid {public_id!r}: this id names a cell of a profile release (a time of "
            "day pooled over many dates), which is published once in its release and has "
            "no /grids endpoints; the dates' own grids are listed by "
            "GET /datasets/{dataset_id}/grids"
        )
    return NotFound(
        f"no grid {public_id[:40]!r}: grid ids are listed by GET /datasets/{{dataset_id}}/grids"
    )


def parse_slot_start(dataset: Dataset, text: str, slot_minutes: int | None = None) -> datetime:
    """A slot start (ISO 8601, naive: local; or epoch seconds) as UTC, or 400. With
    ``slot_minutes``, the start must be a slot boundary of that length (the stored request
    is then canonical: one spelling per slot) and a naive time must exist locally."""
    try:
        us, aware = parse_timestamp(text)
    except (ValueError, OverflowError):
        raise InvalidRequest(f"slot_start {text[:60]!r} is not an ISO 8601 timestamp") from None
    tz = get_zone(dataset.timezone)
    wall = us
    if not aware:
        us = int(localize_us(np.array([us]), tz)[0])
    if not MIN_US <= us < MAX_US:
        raise InvalidRequest(f"slot_start {text[:60]!r} is out of range")
    if slot_minutes is not None:
        _check_boundary(text[:60], us, wall, aware, tz, slot_minutes)
    return us_to_datetime(us)


def _check_boundary(text: str, us: int, wall: int, aware: bool, tz: ZoneInfo, minutes: int) -> None:
    """400 unless ``us`` starts a local slot of ``minutes``, naming the nearest boundaries."""
    skipped = not aware and us + int(utc_offsets_us(np.array([us]), tz)[0]) != wall
    before = int(slot_start_us(np.array([us - 1 if skipped else us]), tz, minutes)[0])
    after = int(slot_start_us(np.array([before + minutes * 60 * US]), tz, minutes)[0])
    nearest = (
        f"the nearest slot starts are {format_local(before, tz)} and {format_local(after, tz)}"
    )
    if skipped:
        raise InvalidRequest(
            f"slot_start {text!r} does not exist in {tz.key} (clocks skip it); {nearest}"
        )
    if before != us:
        raise InvalidRequest(
            f"slot_start {text!r} is not on a {minutes}-minute slot boundary; {nearest}"
        )


def dataset_out(dataset: Dataset) -> DatasetOut:
    names = set(DatasetOut.model_fields) - {"privacy_unit"}
    return DatasetOut(**{n: getattr(dataset, n) for n in names}, privacy_unit=privacy_unit(dataset))


def dataset_detail(session: Session, dataset: Dataset) -> DatasetDetail:
    n_users, n_grids, n_records = DatasetRepository(session).stats(dataset.id)
    return DatasetDetail(
        **dataset_out(dataset).model_dump(), n_users=n_users, n_grids=n_grids, n_records=n_records
    )


def grid_out(grid: Grid, dataset: Dataset) -> GridOut:
    return GridOut(
        grid_id=grid.public_id,
        h3_cell=grid.h3_cell,
        slot_start=format_local(datetime_to_us(grid.slot_start), get_zone(dataset.timezone)),
        n_users=grid.n_users,
        n_records=grid.n_records,
        max_user_records=grid.max_user_records,
    )


GridSort = Literal["n_users", "-n_users", "slot_start", "-slot_start"]


def parse_h3_cell(text: str | None) -> str | None:
    """A valid H3 cell id (lower case), or ``InvalidRequest``."""
    if text is None:
        return None
    cell = text.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{15,16}", cell) or not h3.is_valid_cell(cell):
        raise InvalidRequest(f"h3_cell {text[:20]!r} is not a valid H3 cell id")
    return cell


#: The deepest page a grid listing serves (its index entries skipped, ~0.3 s here).
MAX_LISTING_OFFSET = 1_000_000


def list_grids(
    session: Session,
    dataset: Dataset,
    *,
    slot_start: str | None = None,
    h3_cell: str | None = None,
    limit: int = 1000,
    offset: int = 0,
    min_users: int = 0,
    sort: GridSort | None = None,
    h3_resolution: int | None = None,
    slot_minutes: int | None = None,
) -> GridList:
    """One page of the dataset's grids (its own, or coarser ones made on demand), in (slot, cell)
    order or by ``sort``; its cost is the page's (``GridRepository.page``)."""
    level = grid_level(dataset, h3_resolution, slot_minutes)
    slot = parse_slot_start(dataset, slot_start) if slot_start is not None else None
    cell = parse_h3_cell(h3_cell)
    res = dataset.h3_resolution if level is None else level.h3_resolution
    if cell is not None and h3.get_resolution(cell) != res:
        raise InvalidRequest(f"h3_cell {cell} is not at the listing's resolution {res}")
    if level is not None and slot is not None:
        coarse_grids(session, dataset, level, slot)  # made or refreshed: one slot
    elif level is not None:
        ensure_level(session, dataset, level)
    grids, more = GridRepository(session).page(
        dataset.id,
        level=None if level is None else (level.h3_resolution, level.slot_minutes),
        slot_start=slot,
        h3_cell=cell,
        limit=limit,
        offset=offset,
        min_users=min_users,
        sort=sort,
    )
    return GridList(
        grids=[grid_out(g, dataset) for g in grids],
        limit=limit,
        offset=offset,
        next=offset + len(grids) if more else None,
    )


def all_grids(session: Session, dataset: Dataset, **filters: Any) -> Iterator[GridOut]:
    """Every grid :func:`list_grids` lists with ``filters``, read a page of 10⁴ at a time."""
    offset: int | None = 0
    while offset is not None:
        page = list_grids(session, dataset, limit=10_000, offset=offset, **filters)
        yield from page.grids
        offset = page.next
