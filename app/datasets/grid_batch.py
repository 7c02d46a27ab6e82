"""Many grids' snapshots at once (a slot release reads 10⁵): cache hits as they are, every miss in
one query. A read too large to cache is decoded per column, each grid's arrays views into them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

import numpy as np
from sqlalchemy.orm import Session

from app.core.data.joined import offsets
from app.datasets.grid_store import (
    GridArrays,
    GridVersion,
    cache_grid_snapshots,
    cacheable,
    cached_grid_snapshots,
    check_version,
    native_array,
)
from app.datasets.repository import GridRepository

__all__ = ["GridBatch", "GridColumns", "load_grid_batch", "load_grid_snapshots"]

_ITEM = 8  # bytes per user id, count and value


@dataclass(frozen=True, eq=False)
class GridColumns:
    """Grids' arrays one after the other: grid ``i``'s users (and their counts) are
    ``user_ids[pairs[i]:pairs[i + 1]]``, its values ``values[records[i]:records[i + 1]]``."""

    user_ids: np.ndarray
    counts: np.ndarray
    values: np.ndarray
    pairs: np.ndarray  # int64, one more than the grids
    records: np.ndarray

    @classmethod
    def of(cls, arrays: Sequence[GridArrays]) -> GridColumns:
        """The columns of ``arrays`` (concatenated)."""
        n = len(arrays)
        sizes = np.fromiter((a.user_ids.size for a in arrays), dtype=np.int64, count=n)
        lengths = np.fromiter((a.values.size for a in arrays), dtype=np.int64, count=n)
        ints, floats = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return cls(
            np.concatenate([ints, *(a.user_ids for a in arrays)]),
            np.concatenate([ints, *(a.counts for a in arrays)]),
            np.concatenate([floats, *(a.values for a in arrays)]),
            offsets(sizes),
            offsets(lengths),
        )

    @property
    def sizes(self) -> np.ndarray:
        """Users per grid."""
        return np.diff(self.pairs)


@dataclass(frozen=True, eq=False)
class GridBatch:
    """Grids' arrays in the order asked, and the same as :class:`GridColumns` (the joined
    buffers' own when the read made them, else concatenated on first use)."""

    arrays: list[GridArrays]
    joined: GridColumns | None = None

    @cached_property
    def columns(self) -> GridColumns:
        return self.joined if self.joined is not None else GridColumns.of(self.arrays)


def load_grid_snapshots(session: Session, grids: Sequence[GridVersion]) -> list[GridArrays]:
    """``load_grid_snapshot`` of each grid: :func:`load_grid_batch`'s arrays."""
    return load_grid_batch(session, grids).arrays


def load_grid_batch(session: Session, grids: Sequence[GridVersion]) -> GridBatch:
    """Each grid's arrays at its version: hits as they are, misses in one query (``GridChanged``
    at another version), cached unless too large."""
    found = cached_grid_snapshots(grids)
    missing = [i for i, hit in enumerate(found) if hit is None]
    if grids and len(missing) == len(grids):
        return _read(session, grids)
    if missing:
        read = _read(session, [grids[i] for i in missing]).arrays
        for i, arrays in zip(missing, read, strict=True):
            found[i] = arrays
    return GridBatch([a for a in found if a is not None])


def _read(session: Session, grids: Sequence[GridVersion]) -> GridBatch:
    """The snapshots of ``grids`` (none cached) from the database, in their order."""
    rows = GridRepository(session).snapshot_rows([g.id for g in grids])
    at = {r[0]: r for r in rows}
    empty = (0, 0, b"", b"", b"")
    picked = [at.get(g.id, empty) for g in grids]
    for grid, row in zip(grids, picked, strict=True):
        if row is not empty and row[1] != grid.version:
            check_version(grid, row[1])  # raises GridChanged
    users, counts, values = [r[2] for r in picked], [r[3] for r in picked], [r[4] for r in picked]
    n = len(grids)
    pair_bytes = np.fromiter(map(len, users), dtype=np.int64, count=n)
    value_bytes = np.fromiter(map(len, values), dtype=np.int64, count=n)
    if (pair_bytes % _ITEM).any() or (value_bytes % _ITEM).any():
        raise ValueError("a grid snapshot's buffers are not whole 8-byte items")
    if not np.array_equal(pair_bytes, np.fromiter(map(len, counts), dtype=np.int64, count=n)):
        raise ValueError("a grid snapshot's counts and users differ in number")
    if cacheable(2 * int(pair_bytes.sum()) + 4 * int(value_bytes.sum())):
        arrays = [
            GridArrays.from_bytes(g.id, g.version, u, c, v)
            for g, u, c, v in zip(grids, users, counts, values, strict=True)
        ]
        cache_grid_snapshots(grids, arrays)
        return GridBatch(arrays)
    cols = GridColumns(
        native_array(b"".join(users), "<i8"),
        native_array(b"".join(counts), "<i8"),
        native_array(b"".join(values), "<f8"),
        offsets(pair_bytes // _ITEM),
        offsets(value_bytes // _ITEM),
    )
    return GridBatch(_views(grids, cols), cols)


def _views(grids: Sequence[GridVersion], cols: GridColumns) -> list[GridArrays]:
    """Each grid's arrays as views into ``cols`` (read only, as the columns are)."""
    u, c, v = cols.user_ids, cols.counts, cols.values
    pairs, records = cols.pairs.tolist(), cols.records.tolist()
    return [
        GridArrays(g.id, g.version, u[a:b], c[a:b], v[r:s])
        for g, (a, b), (r, s) in zip(grids, pairwise(pairs), pairwise(records), strict=True)
    ]
