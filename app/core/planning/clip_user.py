"""Clip-User (004 Alg. 1) and the pseudo-user step (004 eq. 15) over many grids.

Releasing every grid at ``eps`` is ``G₁ eps``-DP, ``G₁`` the most grids any user occupies
(004 Cor. II.1); Clip-User suppresses chosen users' records in chosen grids to lower that
factor to ``K`` without raising any grid's worst-case error ``E_g`` (004 eq. 13) above
``E = max_g E_g`` or a target; the pseudo-user step then clips each grid's users at the
``m`` minimising ``E_g(m)``. Public occupancy and ``U`` only: planning costs no budget.
The reading of Alg. 1 (stages, ties, halting, protected grid, targets) and where it
departs from the paper: docs/math.md §6.2–§6.4.

Steps: :mod:`app.core.data.occupancy` indexes the occupancy,
:mod:`app.core.planning.clip_user_greedy` runs the stages, :mod:`app.core.planning.pseudo_user`
is eq. 15, :func:`app.core.mechanisms.bounds.joint_clip_errors` is eq. 13. This module plans
(:func:`clip_user`), records the plan (:class:`ClipUserPlan`) and applies it (:func:`plan_kept`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from app.core.data.checks import check_bound, check_epsilon
from app.core.data.occupancy import Occupancy, int_columns, validate_occupancy
from app.core.mechanisms.bounds import joint_clip_errors
from app.core.planning.clip_user_greedy import Suppression, suppress_users
from app.core.planning.grid_errors import check_split
from app.core.planning.pseudo_user import pseudo_user_step

__all__ = [
    "ClipUserPlan",
    "FrozenMap",
    "Suppressed",
    "clip_user",
    "clip_user_suppressed",
    "load_clip_user_kernels",
    "plan_kept",
]

_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenMap(Mapping[_K, _V]):
    """A read-only, picklable mapping (plans may be cached or sent between processes)."""

    __slots__ = ("_data",)
    _data: dict[_K, _V]  # set once in __init__ (the slot is declared above)

    def __init__(self, data: Mapping[_K, _V]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getitem__(self, key: _K) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("FrozenMap is read-only")

    def __reduce__(self) -> tuple[type[FrozenMap[_K, _V]], tuple[dict[_K, _V]]]:
        return (FrozenMap, (self._data,))


@dataclass(frozen=True)
class ClipUserPlan:
    """Outcome of Clip-User (004 Alg. 1) and the pseudo-user step (004 eq. 15).

    Attributes:
        G1: most grids any user occupies before Clip-User (004 Cor. II.1).
        K: most grids any user still occupies after Clip-User; releasing every
            grid at ``eps`` is ``K eps``-DP (004 Prop. V.1).
        E: the error threshold used: ``max_g E_g`` before any removal (004 eq. 12)
            or the caller's ``error_target``.
        E_bar: ``max_g E_g(m_g)`` after the pseudo-user step (004 eq. 15), or
            ``max(grid_errors)`` when the step is off.
        removed: suppressed ``(grid, user)`` pairs, in removal order.
        m: per grid, the pseudo-user clip ``m_g`` (largest kept count when off).
        grid_errors: per grid, ``E_g`` after the removals, before the pseudo-user step.
        grid_errors_bar: per grid, ``E_g(m_g)`` after the pseudo-user step.
    """

    G1: int
    K: int
    E: float
    E_bar: float
    removed: tuple[tuple[int, int], ...]
    m: Mapping[int, int]
    grid_errors: Mapping[int, float]
    grid_errors_bar: Mapping[int, float]


def clip_user(
    grids: object,
    users: object,
    counts: object,
    U: float,
    eps: float,
    *,
    error_target: float | None = None,
    protect_min_error_grid: bool = False,
    split: str = "half",
    pseudo_user: bool = True,
) -> ClipUserPlan:
    """Plan Clip-User (004 Alg. 1) and the pseudo-user step (004 eq. 15, docs/math.md §6.2–§6.3).

    Args:
        grids, users, counts: equal-length integer arrays, one row per occupied
            ``(grid, user)`` pair with its record count ``m_{g,l} >= 1``. Ids are
            arbitrary non-negative integers; "smallest grid id" and "ascending user
            id" are numeric orders.
        U: public bound on values (``[0, U]``).
        eps: budget of each grid's joint mean+variance release (004 eq. 13).
        error_target: threshold replacing ``E = max_g E_g`` (004 footnote 3).
        protect_min_error_grid: never remove from the grid with the smallest
            initial ``E_g`` (004 §VI-A3).
        split: ``"half"`` (``eps/2`` each, 004 eq. 13) or ``"optimal"`` (docs/math.md §4.3).
        pseudo_user: run the pseudo-user step (004 §V-B3); when off ``m_g`` is the
            largest kept count of ``g`` (no clipping).

    Returns:
        A :class:`ClipUserPlan`. See the module docstring for how Alg. 1 is read.

    Raises:
        ValueError: bad shapes, non-integer or negative ids, counts < 1, duplicate
            pairs, empty occupancy, ``U`` or ``eps`` not finite and > 0, unknown
            ``split``, or ``error_target`` NaN or negative.
    """
    run = clip_user_suppressed(
        grids, users, counts, U, eps, error_target=error_target,
        protect_min_error_grid=protect_min_error_grid, split=split,
    ).run(pseudo_user)  # fmt: skip
    occ, sup = run.occ, run.sup
    removed = tuple(
        zip(
            occ.grid_ids[occ.ginv[run.removed_rows]].tolist(),
            occ.user_ids[occ.uinv[run.removed_rows]].tolist(),
            strict=True,
        )
    )
    gid = occ.grid_ids.tolist()
    return ClipUserPlan(
        G1=sup.G1,
        K=sup.K,
        E=sup.E,
        E_bar=float(run.errs_bar.max()),
        removed=removed,
        m=FrozenMap(dict(zip(gid, run.m.tolist(), strict=True))),
        grid_errors=FrozenMap(dict(zip(gid, run.errs.tolist(), strict=True))),
        grid_errors_bar=FrozenMap(dict(zip(gid, run.errs_bar.tolist(), strict=True))),
    )


@dataclass(frozen=True)
class _Run:
    """Clip-User's outcome as arrays over the checked occupancy ``occ``."""

    occ: Occupancy
    sup: Suppression
    removed_rows: np.ndarray  # input rows removed, in removal order
    m: np.ndarray  # per grid (``occ.grid_ids`` order)
    errs: np.ndarray
    errs_bar: np.ndarray


def clip_user_suppressed(
    grids: object,
    users: object,
    counts: object,
    U: float,
    eps: float,
    *,
    error_target: float | None = None,
    protect_min_error_grid: bool = False,
    split: str = "half",
    checked: Occupancy | None = None,
) -> Suppressed:
    """Clip-User's stages only (:class:`Suppressed`: ``K``, and ``kept()`` or ``run()`` on
    demand). ``checked``: ``validate_occupancy(grids, users, counts)`` when the caller has it
    (a search over epsilon plans one occupancy many times; nothing here changes it)."""
    U = check_bound(U)
    eps = check_epsilon(eps)
    check_split(split)
    occ = validate_occupancy(grids, users, counts) if checked is None else checked
    target = None if error_target is None else _check_target(error_target)
    sup = suppress_users(
        occ, U, eps, split, error_target=target, protect_min_error_grid=protect_min_error_grid
    )
    return Suppressed(occ, sup, sup.K, U, eps, split)


@dataclass(frozen=True)
class Suppressed:
    """Clip-User's stages run on ``occ`` (004 Alg. 1), the pseudo-user step not yet:
    ``K`` is already final, as that step removes nobody (docs/math.md §6.3), so a
    search over ``ε`` reads ``K`` here and finishes only the plan it keeps."""

    occ: Occupancy
    sup: Suppression
    K: int
    U: float
    eps: float
    split: str

    def run(self, pseudo_user: bool = True) -> _Run:
        occ, sup, U, eps, split = self.occ, self.sup, self.U, self.eps, self.split
        c, ginv, order_u, n_per_grid = occ.counts, occ.ginv, occ.order_u, occ.n_per_grid
        # Kept state after Clip-User.
        removed_rows = order_u[np.asarray(sup.removed_pos, dtype=np.int64)]
        kept_mask = np.ones(c.size, dtype=bool)
        kept_mask[removed_rows] = False
        S_a = np.asarray(sup.kept_total, dtype=np.int64)
        top1_a = np.asarray(sup.kept_max, dtype=np.int64)
        errs = joint_clip_errors(U, eps, top1_a, S_a, n_per_grid, split=split)
        if pseudo_user:
            m_a, errs_bar = pseudo_user_step(
                U, eps, ginv[kept_mask], c[kept_mask], n_per_grid, split=split
            )
        else:
            m_a, errs_bar = top1_a, errs
        return _Run(occ, sup, removed_rows, m_a, errs, errs_bar)

    def kept(self) -> np.ndarray:
        """Each input row's kept count ``Γ``: ``plan_kept(clip_user(...), grids, users,
        counts)`` computed directly, without the plan's per-pair tuples and maps (a day
        release has 10⁶ pairs)."""
        run = self.run()
        kept: np.ndarray = np.minimum(run.occ.counts, run.m[run.occ.ginv])
        kept[run.removed_rows] = 0
        return kept


def _check_target(error_target: float) -> float:
    target = float(error_target)
    if math.isnan(target) or target < 0:
        raise ValueError(f"error_target must be a number >= 0, got {error_target!r}")
    return target


def plan_kept(plan: ClipUserPlan, grids: object, users: object, counts: object) -> np.ndarray:
    """Kept count ``Γ`` of each listed pair under ``plan`` (004 §V-B2, eq. 15).

    ``0`` for a pair Clip-User removed, ``min(count, m_g)`` otherwise. The arrays
    are the occupancy the plan was made from (any order, any subset of it).
    Returns an int64 array aligned with the input rows.
    """
    g, u, c = int_columns(grids, users, counts)
    if g.size == 0:
        return np.zeros(0, dtype=np.int64)
    plan_grids = np.fromiter(plan.m.keys(), dtype=np.int64, count=len(plan.m))
    plan_m = np.fromiter(plan.m.values(), dtype=np.int64, count=len(plan.m))
    sort = np.argsort(plan_grids)
    plan_grids, plan_m = plan_grids[sort], plan_m[sort]
    idx = np.searchsorted(plan_grids, g)
    idx_c = np.minimum(idx, plan_grids.size - 1)
    if np.any(plan_grids[idx_c] != g):
        raise ValueError("a listed grid is not part of the plan")
    kept: np.ndarray = np.minimum(c, plan_m[idx_c])
    if plan.removed:
        rem = np.asarray(plan.removed, dtype=np.int64).reshape(-1, 2)
        # Dense indices over the ids seen in rows and removals, then one int64 key.
        _, gi = np.unique(np.concatenate((g, rem[:, 0])), return_inverse=True)
        uids, ui = np.unique(np.concatenate((u, rem[:, 1])), return_inverse=True)
        key = gi.astype(np.int64) * np.int64(uids.size) + ui
        kept[np.isin(key[: g.size], key[g.size :])] = 0
    return kept


def load_clip_user_kernels() -> None:
    """Run Clip-User's compiled stages once (rows by grid, as occupancy's ``stable_order``
    gives them; user 0 in both grids, so the stages run), with the argument types a
    release passes: from numba's on-disk cache, so that no request pays a compile."""
    rows = (np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([1, 1, 2]))
    clip_user_suppressed(*rows, 1.0, 1.0).kept()
