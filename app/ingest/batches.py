"""What every record reader hands the writer: :class:`Batch` (kept rows as arrays) and
:class:`GridCoder`, which numbers an upload's grids and computes their time slots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

import numpy as np

from app.time.slots import slot_start_us

__all__ = ["Batch", "GridCoder"]


@dataclass
class Batch:
    """Kept rows of one batch as arrays, plus its tallies.

    Users and grids are *codes* numbered by first appearance across the upload; ``new_users`` /
    ``new_grids`` list the identifiers and ``(cell int, slot µs)`` keys first seen here. ``ts_us``
    are UTC µs, ``values`` clamped to ``[0, U]``, ``errors`` ``(line or entity number, reason)``.
    """

    user_codes: np.ndarray
    grid_codes: np.ndarray
    ts_us: np.ndarray
    values: np.ndarray
    new_users: list[str] = field(default_factory=list)
    new_grids: list[tuple[int, int]] = field(default_factory=list)
    rows: int = 0
    rejected: int = 0
    clamped: int = 0
    dropped_zero: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts_us)

    @classmethod
    def joined(cls, batches: Sequence[Batch]) -> Batch:
        """One batch of ``batches`` in their order (codes are the upload's, so they join as
        they are)."""
        if len(batches) == 1:
            return batches[0]
        return cls(
            np.concatenate([b.user_codes for b in batches]),
            np.concatenate([b.grid_codes for b in batches]),
            np.concatenate([b.ts_us for b in batches]),
            np.concatenate([b.values for b in batches]),
            [u for b in batches for u in b.new_users],
            [g for b in batches for g in b.new_grids],
            sum(b.rows for b in batches),
            sum(b.rejected for b in batches),
            sum(b.clamped for b in batches),
            sum(b.dropped_zero for b in batches),
            [e for b in batches for e in b.errors],
        )


class GridCoder:
    """Numbers the grids ``(h3 cell, slot start)`` of one upload in order of first
    appearance; the slot of each row is its local-time slot in ``timezone``."""

    def __init__(self, timezone: ZoneInfo, timeslot_minutes: int) -> None:
        self.timezone = timezone
        self.minutes = timeslot_minutes
        self._codes: dict[tuple[int, int], int] = {}

    def codes(
        self, cells: Sequence[int] | np.ndarray, ts_us: np.ndarray
    ) -> tuple[np.ndarray, list]:
        """``(grid code per row, the keys first seen here)`` for rows at UTC ``ts_us``."""
        if not len(cells):
            return np.empty(0, dtype=np.int64), []
        cell = np.array(cells, dtype=np.uint64)
        slot = slot_start_us(ts_us, self.timezone, self.minutes)
        # the batch's distinct keys, each looked up once, in order of first appearance
        order = np.lexsort((slot, cell))  # stable: a key's first row comes first
        c, s = cell[order], slot[order]
        starts = np.ones(order.size, dtype=bool)
        starts[1:] = (c[1:] != c[:-1]) | (s[1:] != s[:-1])
        distinct = np.cumsum(starts) - 1  # in sorted order
        first = order[starts]
        by_appearance = np.argsort(first)
        rows = first[by_appearance]
        known = self._codes
        new_grids: list[tuple[int, int]] = []
        found: list[int] = []
        for key in zip(cell[rows].tolist(), slot[rows].tolist(), strict=True):
            code = known.get(key)
            if code is None:
                code = known[key] = len(known)
                new_grids.append(key)
            found.append(code)
        code_of = np.empty(first.size, dtype=np.int64)
        code_of[by_appearance] = found
        codes = np.empty(order.size, dtype=np.int64)
        codes[order] = code_of[distinct]
        return codes, new_grids
