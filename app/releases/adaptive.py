"""The grids of an adaptive release, and the coverage of any release (docs/math.md §6.6).

Each fine cell's records of a slot are released in exactly one of its H3 ancestors (or
itself), no coarser than ``coarsest``, as :func:`app.core.planning.partition.adaptive_partition`
chooses from public occupancy; released cells are disjoint and each has at least
``min_users`` users. The coverage (shares of the slots' records and users that lie in
released grids) is public too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import h3
import numpy as np
from h3.api import basic_int as h3_int
from sqlalchemy.orm import Session

from app.core.data.occupancy import distinct
from app.core.planning.partition import PartitionTree
from app.datasets.coarse import grid_level
from app.datasets.grid_batch import GridColumns, load_grid_snapshots
from app.datasets.grid_store import GridArrays, SlotGrid
from app.datasets.models import Dataset
from app.releases.slot import SpanGrids, grids_at
from app.time.slots import datetime_to_us

#: ``coarsest_resolution``'s default: this many levels coarser than the finest.
DEFAULT_LEVELS = 3


@dataclass(frozen=True)
class Coverage:
    """Shares of the slots' records and users that lie in released grids."""

    records: float
    users: float
    n_records: int = 0  # the slots' records (the shares' denominator)

    def as_json(self) -> dict[str, float]:
        return {"records": self.records, "users": self.users}


def coverage(cols: GridColumns, covered: Sequence[bool] | np.ndarray) -> Coverage:
    """The coverage when the fine grids (``cols``) with ``covered`` set are released (whole)."""
    inside = np.asarray(covered, dtype=bool)
    if inside.size != cols.pairs.size - 1:
        raise ValueError("coverage: one covered flag per grid")
    records = int(cols.counts.sum())
    if inside.all():  # every grid (a fixed partition with min_users 1): no pair to sort out
        return Coverage(1.0 if records else 0.0, 1.0 if cols.user_ids.size else 0.0, records)
    pair_inside = np.repeat(inside, cols.sizes)
    kept = int(cols.counts[pair_inside].sum())
    n_users = distinct(cols.user_ids).size
    users_in = distinct(cols.user_ids[pair_inside]).size
    return Coverage(
        kept / records if records else 0.0, users_in / n_users if n_users else 0.0, records
    )


@dataclass(frozen=True)
class AdaptiveGrids:
    grids: list[SlotGrid]
    arrays: list[GridArrays]


def _parent(cell: int, res: int) -> int:
    return int(h3_int.cell_to_parent(cell, res))


def _slot_us(grid: SlotGrid) -> int:
    return datetime_to_us(grid.slot_start)


@dataclass(frozen=True)
class SpanTrees:
    """Each slot's partition tree (built once; chosen at any ``ε``)."""

    n_grids: int
    slots: list[tuple[int, list[int], list[int], PartitionTree]]  # slot, grids, cells, tree

    @classmethod
    def of(cls, span: SpanGrids, cols: GridColumns, *, finest: int, coarsest: int) -> SpanTrees:
        by_slot: dict[int, list[int]] = defaultdict(list)
        for i, g in enumerate(span.grids):
            by_slot[_slot_us(g)].append(i)
        slots = []
        sizes = cols.sizes
        for slot, members in by_slot.items():
            first, end = members[0], members[-1] + 1  # a slot's grids are consecutive
            if end - first != len(members):
                raise RuntimeError("a span's grids are not in (slot, cell) order")
            cells = [h3.str_to_int(span.grids[i].h3_cell) for i in members]
            pairs = slice(cols.pairs[first], cols.pairs[end])
            tree = PartitionTree.of(
                np.repeat(np.array(cells, dtype=np.int64), sizes[first:end]),
                cols.user_ids[pairs],
                cols.counts[pairs],
                finest=finest,
                coarsest=coarsest,
                parent_of=_parent,
            )
            slots.append((slot, members, cells, tree))
        return cls(len(span.grids), slots)

    def choose(
        self,
        *,
        min_users: int,
        U: float,
        eps: float,
        useful_width: float,
        statistics: tuple[str, ...],
    ) -> tuple[dict[tuple[int, str], int], list[bool]]:
        """``{(slot µs, released cell): resolution}`` and, per fine grid, whether it is
        covered; a cell is worth more when the statistics asked are useful there at ``eps``."""
        released: dict[tuple[int, str], int] = {}
        covered = [False] * self.n_grids
        for slot, members, cells, tree in self.slots:
            part = tree.choose(
                min_users=min_users,
                U=U,
                eps=eps,
                useful_width=useful_width,
                statistics=statistics,
            )
            released.update({(slot, h3.int_to_str(c)): r for c, r in part.released.items()})
            for i, cell in zip(members, cells, strict=True):
                covered[i] = cell in part.cell_of
        return released, covered

    def covered(self, released: dict[tuple[int, str], int]) -> list[bool]:
        """Per fine grid, whether it lies in one of the ``released`` (slot µs, cell)."""
        covered = [False] * self.n_grids
        for slot, members, cells, tree in self.slots:
            inside = {
                f for s, c in released if s == slot for f in tree.nodes[h3.str_to_int(c)].fine
            }
            for i, cell in zip(members, cells, strict=True):
                covered[i] = cell in inside
        return covered


def adaptive_grids(
    session: Session,
    dataset: Dataset,
    span: SpanGrids,
    arrays: Sequence[GridArrays],
    released: dict[tuple[int, str], int],
    min_users: int,
) -> AdaptiveGrids:
    """The released cells as grids (the fine ones as they are, coarser ones made on
    demand at their level), in (slot, resolution, cell) order, with their arrays."""
    chosen: list[tuple[SlotGrid, GridArrays]] = []
    for res in sorted(set(released.values())):
        if res == span.h3_resolution:
            pairs = zip(span.grids, arrays, strict=True)
            chosen += [(g, a) for g, a in pairs if (_slot_us(g), g.h3_cell) in released]
            continue
        level = grid_level(dataset, res, span.slot_minutes)
        coarse = [
            g
            for g in grids_at(session, dataset, level, span.start, span.end)
            if released.get((_slot_us(g), g.h3_cell)) == res
        ]
        chosen += zip(coarse, load_grid_snapshots(session, coarse), strict=True)
    chosen.sort(key=lambda p: (p[0].slot_start, -h3.get_resolution(p[0].h3_cell), p[0].h3_cell))
    if len(chosen) != len(released) or any(g.n_users < min_users for g, _ in chosen):
        raise RuntimeError("the adaptive partition's grids differ from its cells")
    return AdaptiveGrids([g for g, _ in chosen], [a for _, a in chosen])
