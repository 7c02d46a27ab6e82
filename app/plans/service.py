"""Map arbitrary grid/user ids onto integers, run Clip-User, map back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from app.core.planning.clip_user import clip_user
from app.kit.errors import InvalidRequest
from app.plans.schemas import Id, PreviewIn


def _index(ids: Sequence[Id]) -> tuple[np.ndarray, list[str]]:
    """Integer codes that keep the ids' order (numeric if all ints, else as strings)."""
    if all(isinstance(i, int) for i in ids):
        int_ids = cast("Sequence[int]", ids)  # checked just above
        if min(int_ids) < 0:
            raise InvalidRequest("grid and user ids must be non-negative")
        return np.asarray(int_ids, dtype=np.int64), []
    labels = sorted({str(i) for i in ids})
    code = {label: k for k, label in enumerate(labels)}
    return np.fromiter((code[str(i)] for i in ids), dtype=np.int64, count=len(ids)), labels


def preview(body: PreviewIn) -> dict[str, object]:
    grids_raw, users_raw, counts = zip(*body.occupancy, strict=True)
    try:
        grids, grid_labels = _index(grids_raw)
        users, user_labels = _index(users_raw)
        count_array = np.asarray(counts, dtype=np.int64)
    except OverflowError:
        raise InvalidRequest("integer ids and counts must be below 2**63") from None
    try:
        plan = clip_user(
            grids,
            users,
            count_array,
            body.value_bound,
            body.epsilon,
            error_target=body.error_target,
            protect_min_error_grid=body.protect_min_error_grid,
            split=body.split,
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc

    def grid_id(g: int) -> Id:
        return grid_labels[g] if grid_labels else g

    def user_id(u: int) -> Id:
        return user_labels[u] if user_labels else u

    return {
        "G1": plan.G1,
        "K": plan.K,
        "E": plan.E,
        "E_bar": plan.E_bar,
        "removed": [(grid_id(g), user_id(u)) for g, u in plan.removed],
        "m": {str(grid_id(g)): int(m) for g, m in plan.m.items()},
    }
