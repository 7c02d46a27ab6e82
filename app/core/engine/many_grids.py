"""The first step of a slot release for many grids at once (docs/math.md §9.4.9).

:func:`start_many` is :func:`app.core.engine.single_grid.start_releases` for every grid
of a release:
the grids on which ``auto`` takes the window path run together in arrays
(:mod:`app.core.engine.window_batch`), the others one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from app.core.data.checks import check_bound, check_epsilon
from app.core.data.grid import GridData
from app.core.data.joined import GridInput, JoinedGrids
from app.core.data.window_grids import WindowGrids, fits
from app.core.engine.batch import PendingBatch
from app.core.engine.centred_batch import CENTRED_PATH, start_centred_releases
from app.core.engine.single_grid import start_releases
from app.core.engine.user_mean_batch import start_user_mean_releases
from app.core.engine.window_batch import start_window_releases
from app.core.mechanisms import registry
from app.core.mechanisms.auto import auto_path
from app.core.mechanisms.draft import PendingRelease
from app.core.mechanisms.option_spec import OptionValue
from app.core.noise.laplace import NoiseSource, default_noise

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
    joined: JoinedGrids | None = None,
    **options: OptionValue,
) -> PendingBatch:
    """The rows of :func:`start_releases` of each grid, grid after grid and each grid's
    ``statistics`` in order (``caps[i]`` for ``grids[i]``; a grid is a :class:`GridData`
    or has ``counts``, ``values`` and a ``grid`` that is one). The grids on which ``auto``
    takes the window path are run together in arrays
    (:func:`app.core.engine.window_batch.start_window_releases`, docs/math.md §9.4.9): the same
    rows, bit for bit given the same private choices; ``user_mean`` of every grid runs in
    arrays too (:func:`app.core.engine.user_mean_batch.start_user_mean_releases`).
    ``joined``: the grids and caps as :class:`JoinedGrids`, when the caller has them so.
    Raises :class:`GridError` for a grid that cannot be released."""
    for statistic in statistics:
        if statistic not in registry.STATISTICS:
            raise ValueError(
                f"unknown statistic {statistic!r}; use 'mean', 'variance' or 'user_mean'"
            )
    U, eps = check_bound(U), check_epsilon(eps)
    source = default_noise() if noise is None else noise
    others = [s for s in statistics if s != "user_mean"]
    if len(others) < len(statistics) and joined is None:
        joined = JoinedGrids.of(grids, caps)
    if not others:
        assert joined is not None
        return _user_means(grids, caps, joined, U, eps, mechanism, source, options)
    rows = _start_others(others, grids, caps, U, eps, mechanism, source, joined, options)
    if len(others) == len(statistics):
        return rows
    assert joined is not None
    means = _user_means(grids, caps, joined, U, eps, mechanism, source, options)
    order = [
        len(rows) + i if s == "user_mean" else i * len(others) + others.index(s)
        for i in range(len(grids))
        for s in statistics
    ]
    return PendingBatch.concat([rows, means], order)


def _user_means(
    grids: Sequence[GridInput],
    caps: Sequence[np.ndarray],
    joined: JoinedGrids,
    U: float,
    eps: float,
    mechanism: str,
    source: NoiseSource,
    options: Mapping[str, OptionValue],
) -> PendingBatch:
    """``user_mean`` of every grid: in arrays where every grid's values and caps fit
    (checked), else grid by grid (which names what is wrong)."""
    opts = registry.validate_options("user_mean", mechanism, options)
    if joined.n_grids == len(grids) and fits(joined, U) and bool(np.all(joined.caps >= 0)):
        eff = np.minimum(joined.counts, joined.caps)
        at = joined.user_grid()
        read = np.bincount(at[eff > 0], minlength=joined.n_grids)
        if np.all(read > 0):
            return start_user_mean_releases(joined, U, eps, mechanism, opts)
    alone: list[PendingRelease] = []
    for i, (grid, cap) in enumerate(zip(grids, caps, strict=True)):
        try:
            alone += start_releases(
                ("user_mean",),
                _grid_data(grid),
                U,
                eps,
                mechanism,
                caps=cap,
                noise=source,
                **options,
            )
        except ValueError as exc:
            raise GridError(i, exc) from exc
    return PendingBatch.of(alone, U)


def _start_others(
    statistics: Sequence[str],
    grids: Sequence[GridInput],
    caps: Sequence[np.ndarray],
    U: float,
    eps: float,
    mechanism: str,
    source: NoiseSource,
    joined: JoinedGrids | None,
    options: Mapping[str, OptionValue],
) -> PendingBatch:
    """The rows of the record statistics (mean, variance), grid after grid: ``auto``'s
    window grids (every statistic on its window path) together, then each statistic's
    centred grids together, then the other (grid, statistic) pairs grid by grid."""
    batched: list[int] = []
    centred: dict[str, list[int]] = {}
    known: WindowGrids | None = None
    if mechanism == "auto" and options == {"objective": "accuracy"} and statistics:
        if joined is None:
            joined = JoinedGrids.of(grids, caps)
        elif joined.n_grids != len(grids):
            raise ValueError("the joined grids are not these grids")
        batched, centred, known = _array_grids(statistics, joined, U, eps)
    G, S = len(grids), len(statistics)
    parts: list[PendingBatch] = []
    row = np.full((G, S), -1, dtype=np.int64)  # each (grid, statistic)'s row in the parts
    done = 0
    if batched and joined is not None:
        window = start_window_releases(
            statistics, joined if known is not None else joined.take(batched), U, eps,
            source, known,
        )  # fmt: skip
        if len(batched) == G:  # all on the window path: rows in grid order
            return window
        row[batched] = np.arange(len(window)).reshape(-1, S)
        parts.append(window)
        done += len(window)
    same: dict[tuple[int, ...], list[int]] = {}  # statistics with the same centred grids
    for s, statistic in enumerate(statistics):
        if centred.get(statistic) and joined is not None:
            same.setdefault(tuple(centred[statistic]), []).append(s)
    for idx, which in same.items():
        assert joined is not None
        every = len(idx) == G
        got = start_centred_releases(
            [statistics[s] for s in which], joined, U, eps, source, None if every else idx
        )
        if every and S == 1:
            return got[0]
        for s, rows in zip(which, got, strict=True):
            row[list(idx), s] = done + np.arange(len(rows))
            parts.append(rows)
            done += len(rows)
    alone: list[PendingRelease] = []
    for i in np.flatnonzero((row < 0).any(axis=1)).tolist():
        left = np.flatnonzero(row[i] < 0)
        try:
            alone += start_releases(
                [statistics[s] for s in left.tolist()], _grid_data(grids[i]), U, eps,
                mechanism, caps=caps[i], noise=source, **options,
            )  # fmt: skip
        except ValueError as exc:
            raise GridError(i, exc) from exc
        row[i, left] = done + np.arange(left.size)
        done += left.size
    parts.append(PendingBatch.of(alone, U))
    return PendingBatch.concat(parts, row.reshape(-1).tolist())


def _grid_data(grid: GridInput) -> GridData:
    if isinstance(grid, GridData):
        return grid
    made = getattr(grid, "grid", None)  # the grid store's cached engine grid
    if isinstance(made, GridData):
        return made
    return GridData.from_counts_and_values(grid.counts, grid.values)


def _array_grids(
    statistics: Sequence[str], joined: JoinedGrids, U: float, eps: float
) -> tuple[list[int], dict[str, list[int]], WindowGrids | None]:
    """The grids whose every statistic ``auto`` runs on its window path (checked counts);
    per statistic, the other grids where ``auto`` runs its centred mechanism; the first
    ones' :class:`WindowGrids` when every grid is (else ``None``). None when a grid's
    values fail :meth:`GridData.validate` (each is then checked alone)."""
    if not fits(joined, U):
        return [], {}, None
    # per grid: no negative cap (nor unreadable caps: -1), some user with a record kept
    at = joined.user_grid()
    eff = np.minimum(joined.counts, joined.caps)
    negative = np.bincount(at[joined.caps < 0], minlength=joined.n_grids) > 0
    active = np.bincount(at[eff > 0], minlength=joined.n_grids) > 0
    fit = np.flatnonzero(active & ~negative).tolist()
    if not fit:
        return [], {}, None
    fitting = joined if len(fit) == joined.n_grids else joined.take(fit)
    wg = WindowGrids.of(fitting)
    # auto's path is a function of (median count, active users): once per distinct pair
    pairs, which = np.unique(np.stack([wg.median, wg.L]), axis=1, return_inverse=True)
    on_path = np.array(
        [
            all(auto_path(s, k, n, eps) == WINDOW_PATH[s] for s in statistics)
            for k, n in pairs.T.tolist()
        ],
        dtype=bool,
    )
    which = which.reshape(-1)
    chosen = [i for i, ok in zip(fit, on_path[which].tolist(), strict=True) if ok]
    off_window = ~on_path[which]
    centred: dict[str, list[int]] = {}
    for s in statistics:
        paths = [auto_path(s, k, n, eps) == CENTRED_PATH[s] for k, n in pairs.T.tolist()]
        on_centred = np.array(paths, dtype=bool)[which] & off_window
        centred[s] = [i for i, ok in zip(fit, on_centred.tolist(), strict=True) if ok]
    return chosen, centred, (wg if len(chosen) == joined.n_grids else None)
