"""The first step of a slot release for many grids at once (docs/math.md §9.4.9).

:func:`start_many` is :func:`app.core.engine.start_releases` for every grid of a release:
the grids on which ``auto`` takes the window path run together in arrays
(:mod:`app.core.window_batch`), the others one by one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core import registry
from app.core.auto import auto_path
from app.core.batch import PendingBatch
from app.core.bounds import check_bound, check_epsilon
from app.core.draft import PendingRelease
from app.core.engine import start_releases
from app.core.grid import GridData
from app.core.noise import NoiseSource, default_noise
from app.core.option_spec import OptionValue
from app.core.window_batch import GridInput, WindowGrids, fits, start_window_releases

__all__ = ["GridError", "start_many"]


class GridError(ValueError):
    """A grid of :func:`start_many` that cannot be released: ``index`` says which."""

    def __init__(self, index: int, exc: ValueError) -> None:
        super().__init__(str(exc))
        self.index = index


WINDOW_PATH = {"mean": "user_window", "variance": "window"}


def start_many(
    statistics: Sequence[str],
    grids: Sequence[GridInput],
    caps: Sequence[np.ndarray],
    U: float,
    eps: float,
    mechanism: str = "auto",
    *,
    noise: NoiseSource | None = None,
    **options: OptionValue,
) -> PendingBatch:
    """The rows of :func:`start_releases` of each grid, grid after grid and each grid's
    ``statistics`` in order (``caps[i]`` for ``grids[i]``; a grid is a :class:`GridData`
    or has ``counts``, ``values`` and a ``grid`` that is one). The grids on which ``auto``
    takes the window path are run together in arrays
    (:func:`app.core.window_batch.start_window_releases`, docs/math.md §9.4.9): the same
    rows, bit for bit given the same private choices. Raises :class:`GridError` for a
    grid that cannot be released."""
    for statistic in statistics:
        if statistic not in registry.STATISTICS:
            raise ValueError(f"unknown statistic {statistic!r}; use 'mean' or 'variance'")
    U, eps = check_bound(U), check_epsilon(eps)
    source = default_noise() if noise is None else noise
    batched: list[int] = []
    known: WindowGrids | None = None
    if mechanism == "auto" and options == {"objective": "accuracy"} and statistics:
        batched, known = _window_grids(statistics, grids, caps, U, eps)
    window = PendingBatch.of([], U)
    if batched:
        window = start_window_releases(
            statistics,
            [grids[i] for i in batched],
            [caps[i] for i in batched],
            U,
            eps,
            source,
            known,
        )
    chosen = set(batched)
    alone: list[PendingRelease] = []
    first_row: list[int] = []  # per grid, its first row in (window rows, then the others)
    for i, (grid, cap) in enumerate(zip(grids, caps, strict=True)):
        if i in chosen:
            continue
        try:
            started = start_releases(
                statistics, _grid_data(grid), U, eps, mechanism, caps=cap, noise=source, **options
            )
        except ValueError as exc:
            raise GridError(i, exc) from exc
        alone += started
    S = len(statistics)
    w = k = 0
    for i in range(len(grids)):
        if i in chosen:
            first_row.append(w * S)
            w += 1
        else:
            first_row.append(len(window) + k * S)
            k += 1
    order = [r + s for r in first_row for s in range(S)]
    return PendingBatch.concat([window, PendingBatch.of(alone, U)], order)


def _grid_data(grid: GridInput) -> GridData:
    if isinstance(grid, GridData):
        return grid
    made = getattr(grid, "grid", None)  # the grid store's cached engine grid
    if isinstance(made, GridData):
        return made
    return GridData.from_counts_and_values(grid.counts, grid.values)


def _window_grids(
    statistics: Sequence[str],
    grids: Sequence[GridInput],
    caps: Sequence[np.ndarray],
    U: float,
    eps: float,
) -> tuple[list[int], WindowGrids | None]:
    """The grids whose every statistic ``auto`` runs on its window path (checked counts),
    and their :class:`WindowGrids` when it is at hand; none when a grid's values fail
    :meth:`GridData.validate` (each is then checked alone)."""
    if not fits(grids, U):
        return [], None
    capped = [np.asarray(c) for c in caps]
    shaped = [
        i
        for i, (grid, c) in enumerate(zip(grids, capped, strict=True))
        if c.shape == grid.counts.shape and c.dtype.kind in "iu" and c.size
    ]
    if not shaped:
        return [], None
    # per grid: no negative cap, and some user with a record under its cap
    cc = np.concatenate([capped[i] for i in shaped]).astype(np.int64)
    counts = np.concatenate([grids[i].counts for i in shaped])
    at = np.repeat(np.arange(len(shaped)), [capped[i].size for i in shaped])
    negative = np.bincount(at[cc < 0], minlength=len(shaped)) > 0
    active = np.bincount(at[np.minimum(counts, cc) > 0], minlength=len(shaped)) > 0
    fit = [i for i, ok in zip(shaped, active & ~negative, strict=True) if ok]
    if not fit:
        return [], None
    wg = WindowGrids.of([grids[i] for i in fit], [capped[i] for i in fit])
    # auto's path is a function of (median count, active users): once per distinct pair
    pairs, which = np.unique(np.stack([wg.median, wg.L]), axis=1, return_inverse=True)
    on_path = np.array(
        [
            all(auto_path(s, k, n, eps) == WINDOW_PATH[s] for s in statistics)
            for k, n in pairs.T.tolist()
        ],
        dtype=bool,
    )
    chosen = [i for i, ok in zip(fit, on_path[which.reshape(-1)].tolist(), strict=True) if ok]
    return chosen, (wg if len(chosen) == len(fit) else None)
