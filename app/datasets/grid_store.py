"""Per-grid engine input: snapshots built at ingestion, loaded through a byte-bounded LRU keyed by
grid and ``version`` (which every change bumps, so a stale entry is never served)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import NamedTuple, Protocol

import numpy as np
from sqlalchemy.orm import Session

from app.core.data.grid import GridData
from app.datasets.repository import GridRepository
from app.kit.errors import Conflict

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
#: Keys looked up per hold of the cache's lock by a read of many grids.
_LOOKUP_CHUNK = 4096


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class GridArrays:
    """The engine's input for one grid version (read-only): user ``i`` owns ``counts[i]``
    consecutive ``values``, earliest first."""

    grid_id: int
    version: int
    user_ids: np.ndarray
    counts: np.ndarray
    values: np.ndarray

    @cached_property
    def grid(self) -> GridData:
        """The engine's grid, built once per cached version."""
        return GridData.from_counts_and_values(self.counts, self.values)

    @property
    def nbytes(self) -> int:
        # the engine grid adds a copy of the values and two prefix-sum arrays
        return int(self.user_ids.nbytes + self.counts.nbytes + 4 * self.values.nbytes)

    @classmethod
    def from_bytes(
        cls, grid_id: int, version: int, user_ids: bytes, counts: bytes, values: bytes
    ) -> GridArrays:
        return cls(
            grid_id=grid_id,
            version=version,
            user_ids=native_array(user_ids, "<i8"),
            counts=native_array(counts, "<i8"),
            values=native_array(values, "<f8"),
        )


def native_array(buffer: bytes, stored: str) -> np.ndarray:
    """A read-only native-order array over a little-endian buffer (a view where possible)."""
    if not isinstance(buffer, bytes):
        buffer = bytes(buffer)
    a = np.frombuffer(buffer, dtype=stored)
    return a if a.dtype.isnative else _readonly(a.astype(a.dtype.newbyteorder("=")))


class _LRU:
    """A byte-bounded LRU of :class:`GridArrays`, safe across threads."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[tuple[str, int, int], GridArrays] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int, int]) -> GridArrays | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def get_many(
        self, items: Sequence[GridVersion], key: Callable[[GridVersion], tuple[str, int, int]]
    ) -> list[GridArrays | None]:
        """:meth:`get` of each item, the lock taken per chunk of keys."""
        if not self._items:  # a put racing this only turns a hit into a read
            with self._lock:
                self.misses += len(items)
            return [None] * len(items)
        found: list[GridArrays | None] = []
        for start in range(0, len(items), _LOOKUP_CHUNK):
            keys = [key(item) for item in items[start : start + _LOOKUP_CHUNK]]
            with self._lock:
                for k in keys:
                    hit = self._items.get(k)
                    if hit is None:
                        self.misses += 1
                    else:
                        self._items.move_to_end(k)
                        self.hits += 1
                    found.append(hit)
        return found

    def put(self, key: tuple[str, int, int], item: GridArrays) -> None:
        with self._lock:
            if key in self._items or item.nbytes > self.max_bytes:
                return
            self._items[key] = item
            self.bytes += item.nbytes
            self._evict()

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def _evict(self) -> None:
        while self.bytes > self.max_bytes and self._items:
            _, old = self._items.popitem(last=False)
            self.bytes -= old.nbytes


_cache = _LRU(DEFAULT_CACHE_BYTES)


def configure_grid_cache(max_bytes: int) -> None:
    """Set the cache's byte budget (``settings.grid_cache_bytes``; 0 disables it)."""
    _cache.resize(max(0, int(max_bytes)))


def clear_grid_cache() -> None:
    _cache.clear()


def grid_cache_info() -> dict[str, int]:
    return {
        "entries": len(_cache._items),
        "bytes": _cache.bytes,
        "max_bytes": _cache.max_bytes,
        "hits": _cache.hits,
        "misses": _cache.misses,
    }


class GridVersion(Protocol):
    """A grid at a version (an ORM ``Grid`` or a query's ``GridContext``)."""

    @property
    def id(self) -> int: ...
    @property
    def public_id(self) -> str: ...
    @property
    def version(self) -> int: ...


class SlotGrid(GridVersion, Protocol):
    """A grid as a release reads it: a :class:`GridRow` or an ORM ``Grid``."""

    @property
    def h3_cell(self) -> str: ...
    @property
    def slot_start(self) -> datetime: ...
    @property
    def n_users(self) -> int: ...


class GridRow(NamedTuple):
    """A grid's fields as read, without an ORM instance (a span's 10⁵ grids, read only)."""

    id: int
    public_id: str
    h3_cell: str
    slot_start: datetime  # UTC
    n_users: int
    version: int


class GridChanged(Conflict):
    """The grid's snapshot is not the version the caller saw (an upload committed in between)."""


def _key(grid: GridVersion) -> tuple[str, int, int]:
    # public_id is random per grid, so equal keys never come from two databases
    return (grid.public_id, grid.id, grid.version)


def cached_grid_snapshot(grid: GridVersion) -> GridArrays | None:
    """The cached engine input of ``grid`` at its version, without touching the database."""
    return _cache.get(_key(grid))


def cached_grid_snapshots(grids: Sequence[GridVersion]) -> list[GridArrays | None]:
    """:func:`cached_grid_snapshot` of each grid (one lock, nothing done when empty)."""
    return _cache.get_many(grids, _key)


def cacheable(nbytes: int) -> bool:
    """Whether a read of ``nbytes`` is cached (no more than the cache holds)."""
    return nbytes <= _cache.max_bytes


def cache_grid_snapshots(grids: Sequence[GridVersion], arrays: Sequence[GridArrays]) -> None:
    """Cache each grid's arrays (read at its version)."""
    for grid, item in zip(grids, arrays, strict=True):
        _cache.put(_key(grid), item)


def load_grid_snapshot(session: Session, grid: GridVersion) -> GridArrays:
    """The engine input of ``grid`` at its current version, from the cache or its snapshot."""
    hit = cached_grid_snapshot(grid)
    return hit if hit is not None else read_grid_snapshot(session, grid)


def check_version(grid: GridVersion, version: int) -> None:
    if version != grid.version:
        raise GridChanged(
            f"grid {grid.public_id} changed while it was read (version {grid.version} "
            f"became {version}); retry"
        )


def read_grid_snapshot(session: Session, grid: GridVersion) -> GridArrays:
    """A cache miss: ``grid``'s snapshot from the database, then cached; empty arrays without one;
    :class:`GridChanged` at another version."""
    snap = GridRepository(session).snapshot(grid.id)
    if snap is None:
        arrays = GridArrays.from_bytes(grid.id, grid.version, b"", b"", b"")
    else:
        check_version(grid, snap.version)
        arrays = GridArrays.from_bytes(
            grid.id, snap.version, snap.user_ids, snap.counts, snap.values
        )
    _cache.put(_key(grid), arrays)
    return arrays


@dataclass(frozen=True)
class GridSummary:
    """A grid's public occupancy and its encoded snapshot buffers."""

    grid_id: int
    n_users: int
    n_records: int
    max_user_records: int
    user_ids: bytes
    counts: bytes
    values: bytes


def summarise_grids(
    grid_ids: np.ndarray, user_ids: np.ndarray, values: np.ndarray
) -> Iterator[GridSummary]:
    """Split records sorted by (grid, user, timestamp, record id) into per-grid snapshots."""
    n = grid_ids.size
    if n == 0:
        return
    new_grid = np.empty(n, dtype=bool)
    new_grid[0] = True
    np.not_equal(grid_ids[1:], grid_ids[:-1], out=new_grid[1:])
    new_user = new_grid.copy()
    new_user[1:] |= user_ids[1:] != user_ids[:-1]
    seg_start = np.flatnonzero(new_user)  # one segment per (grid, user)
    seg_users = user_ids[seg_start].astype("<i8")
    seg_counts = np.diff(np.append(seg_start, n)).astype("<i8")
    grid_start = np.flatnonzero(new_grid)  # record index where each grid starts
    grid_seg = np.searchsorted(seg_start, grid_start)  # its first segment
    max_counts = np.maximum.reduceat(seg_counts, grid_seg).tolist()
    rec_bounds = np.append(grid_start, n).tolist()
    seg_bounds = np.append(grid_seg, seg_start.size).tolist()
    vals = values.astype("<f8", copy=False)
    gids = grid_ids[grid_start].tolist()
    for i, gid in enumerate(gids):
        a, b = seg_bounds[i], seg_bounds[i + 1]
        s, e = rec_bounds[i], rec_bounds[i + 1]
        yield GridSummary(
            grid_id=gid,
            n_users=b - a,
            n_records=e - s,
            max_user_records=max_counts[i],
            user_ids=seg_users[a:b].tobytes(),
            counts=seg_counts[a:b].tobytes(),
            values=vals[s:e].tobytes(),
        )
