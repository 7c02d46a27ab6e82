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
) -> list[list[PendingRelease]]:
    """:func:`start_releases` of each grid (``caps[i]`` for ``grids[i]``; a grid is a
    :class:`GridData` or has ``counts``, ``values`` and a ``grid`` that is one). The grids
    on which ``auto`` takes the window path are run together in arrays
    (:func:`app.core.window_batch.start_window_releases`, docs/math.md §9.4.9): the same
    pending releases, bit for bit given the same private choices. Raises
    :class:`GridError` for a grid that cannot be released."""
    for statistic in statistics:
        if statistic not in registry.STATISTICS:
            raise ValueError(f"unknown statistic {statistic!r}; use 'mean' or 'variance'")
    U, eps = check_bound(U), check_epsilon(eps)
    source = default_noise() if noise is None else noise
    batched: list[int] = []
    if mechanism == "auto" and options == {"objective": "accuracy"} and statistics:
        batched = _window_grids(statistics, grids, caps, U, eps)
    out: list[list[PendingRelease]] = [[] for _ in grids]
    if batched:
        started = start_window_releases(
            statistics, [grids[i] for i in batched], [caps[i] for i in batched], U, eps, source
        )
        for i, pending in zip(batched, started, strict=True):
            out[i] = pending
    chosen = set(batched)
    for i, (grid, cap) in enumerate(zip(grids, caps, strict=True)):
        if i in chosen:
            continue
        try:
            out[i] = start_releases(
                statistics, _grid_data(grid), U, eps, mechanism, caps=cap, noise=source, **options
            )
        except ValueError as exc:
            raise GridError(i, exc) from exc
    return out


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
) -> list[int]:
    """The grids whose every statistic ``auto`` runs on its window path (checked counts);
    none when a grid's values fail :meth:`GridData.validate` (each is then checked alone)."""
    if not fits(grids, U):
        return []
    fit = []
    for i, (grid, cap) in enumerate(zip(grids, caps, strict=True)):
        c = np.asarray(cap)
        ok = c.shape == grid.counts.shape and c.dtype.kind in "iu" and c.size and c.min() >= 0
        if ok and np.any(np.minimum(grid.counts, c) > 0):
            fit.append(i)
    if not fit:
        return []
    wg = WindowGrids.of([grids[i] for i in fit], [np.asarray(caps[i]) for i in fit])
    path = [
        all(auto_path(s, k, n, eps) == WINDOW_PATH[s] for s in statistics)
        for k, n in zip(wg.median.tolist(), wg.L.tolist(), strict=True)
    ]
    return [i for i, ok in zip(fit, path, strict=True) if ok]
