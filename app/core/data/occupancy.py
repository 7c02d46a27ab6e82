"""The public occupancy of many grids: ``(grid, user, count)`` rows, checked and indexed.

Clip-User (:mod:`app.core.planning.clip_user`) plans from the record count ``m_{g,l}`` of
every occupied ``(grid, user)`` pair and nothing else (docs/math.md §6.2, §1.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

__all__ = [
    "Occupancy",
    "distinct",
    "int_columns",
    "stable_order",
    "unique_inverse",
    "validate_occupancy",
]


def _as_int_array(name: str, a: object) -> np.ndarray:
    """``a`` as a 1-d int64 array (integral floats accepted), else ``ValueError``."""
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array")
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "b":
        raise ValueError(f"{name} must hold integers, not booleans")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        if np.max(np.abs(arr)) >= 2**62:
            raise ValueError(f"{name} holds integers too large")
        return arr.astype(np.int64)
    raise ValueError(f"{name} must hold integers")


def int_columns(
    grids: object, users: object, counts: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three columns of an occupancy as int64 arrays of one length, else ``ValueError``."""
    g = _as_int_array("grids", grids)
    u = _as_int_array("users", users)
    c = _as_int_array("counts", counts)
    if not g.size == u.size == c.size:
        raise ValueError("grids, users and counts must have the same length")
    return g, u, c


@dataclass(frozen=True, slots=True)
class Occupancy:
    """A checked occupancy, one entry per row of the input.

    Attributes:
        counts: ``m_{g,l} >= 1`` of each row.
        grid_ids, user_ids: the distinct ids, ascending.
        ginv, uinv: each row's index into ``grid_ids`` / ``user_ids``.
        n_per_grid: each grid's record count ``n_g``, indexed like ``grid_ids``.
        order_u: the rows sorted by (user, grid).
        memo: what planners derive from it whatever ``ε`` (Clip-User's
            :func:`~app.core.planning.clip_user_greedy.greedy_prep`), made once.
    """

    counts: np.ndarray
    grid_ids: np.ndarray
    ginv: np.ndarray
    user_ids: np.ndarray
    uinv: np.ndarray
    n_per_grid: np.ndarray
    order_u: np.ndarray
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` of non-negative int64s (the inverse as int64),
    without a sort where it can: ``x`` non-decreasing (a release's grid column), or its
    values dense (a presence table over ``0..max``, as a release's user ids or
    Clip-User's (grid, count) keys)."""
    if x.size == 0:
        return x.copy(), np.empty(0, dtype=np.int64)
    if np.all(x[1:] >= x[:-1]):
        new = np.empty(x.size, dtype=bool)
        new[0] = True
        np.not_equal(x[1:], x[:-1], out=new[1:])
        return x[new], np.cumsum(new, dtype=np.int64) - 1
    top = int(x.max())
    if top < 4 * x.size + 1024:
        present = np.zeros(top + 1, dtype=bool)
        present[x] = True
        lookup = np.cumsum(present, dtype=np.int64) - 1
        return np.flatnonzero(present).astype(np.int64), lookup[x]
    ids, inv = np.unique(x, return_inverse=True)
    return ids, inv.astype(np.int64, copy=False).reshape(-1)


def distinct(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` of non-negative int64s: by a presence table over ``0..max`` where the
    values are dense (a release's user ids or budget subjects renumbered densely), else by a
    sort (numpy's hashed ``unique`` is several times slower on millions of values)."""
    if x.size == 0:
        return np.empty(0, dtype=np.int64)
    top = int(x.max())
    if top < 4 * x.size + 1024:
        present = np.zeros(top + 1, dtype=bool)
        present[x] = True
        return np.flatnonzero(present).astype(np.int64)
    ordered = np.sort(x)
    new = np.empty(ordered.size, dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    return ordered[new].astype(np.int64, copy=False)


@njit(cache=True, nogil=True)
def stable_order(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for int64 keys in ``[0, n_keys)``, as a counting
    sort in O(``keys.size + n_keys``) time and memory (``n_keys``: a user count here)."""
    start = np.zeros(n_keys + 1, dtype=np.int64)
    for k in keys:
        start[k + 1] += 1
    for k in range(n_keys):
        start[k + 1] += start[k]
    order = np.empty(keys.size, dtype=np.int64)
    for i in range(keys.size):
        order[start[keys[i]]] = i
        start[keys[i]] += 1
    return order


def validate_occupancy(grids: object, users: object, counts: object) -> Occupancy:
    """Check the occupancy; return its counts, ids, inverse indices, per-grid totals
    and the row order sorted by (user, grid)."""
    g, u, c = int_columns(grids, users, counts)
    if g.size == 0:
        raise ValueError("the occupancy is empty: need at least one (grid, user) pair")
    if g.min() < 0 or u.min() < 0:
        raise ValueError("grid and user ids must be non-negative")
    if c.min() < 1:
        raise ValueError("every listed (grid, user) pair needs a count >= 1")
    if c.max() >= 2**31:
        raise ValueError("counts must be below 2**31")
    grid_ids, ginv = unique_inverse(g)
    user_ids, uinv = unique_inverse(u)
    key = uinv * np.int64(grid_ids.size) + ginv
    if np.all(ginv[1:] >= ginv[:-1]):  # rows by grid: by user, stably, is by (user, grid)
        order_u = stable_order(uinv, user_ids.size)
    else:
        order_u = np.argsort(key, kind="stable")
    skey = key[order_u]
    if np.any(skey[1:] == skey[:-1]):
        raise ValueError("duplicate (grid, user) pairs in the occupancy")
    # float64 sums of integers are exact below 2**53, so a total below 2**31 is exact and
    # one at or above it is never rounded below it (refused before the cast)
    totals = np.bincount(ginv, weights=c, minlength=grid_ids.size)
    if totals.max() >= 2**31:
        raise ValueError("a grid's record count must be below 2**31")
    n_per_grid = totals.astype(np.int64)
    return Occupancy(c, grid_ids, ginv, user_ids, uinv, n_per_grid, order_u)
