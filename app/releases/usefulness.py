"""How useful a release is, from public expected widths only, and what to change when it
is not (a release's and its preview's ``useful`` and ``warnings``).

A released cell is *useful* when the expected width of every statistic's published ci95
(:func:`app.core.expected_ci95_widths`, docs/math.md §11.6: public counts, ``U``, ``ε``
and the plan's caps) is at most ``useful_width``. ``useful.records`` is the share of the
slots' records that lie in useful cells, ``useful.cells`` their number. The preview and
the release compute it with :func:`usefulness` on the same plan, so they agree exactly;
nothing here reads a value or draws noise (post-processing of public information).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app import core
from app.datasets.grid_store import GridArrays
from app.releases.planning import Occupancy, SlotPlan

#: Below this share of useful records a release warns.
USEFUL_FLOOR = 0.5
#: Above this share of suppressed (unit, cell) contributions a release warns.
SUPPRESSED_CEILING = 0.5


@dataclass(frozen=True)
class Usefulness:
    width: float
    records: float  # share of the slots' records in useful cells
    cells: int
    widths: list[dict[str, float]]  # per released grid (a kept user): each statistic's width

    def as_json(self) -> dict[str, float | int]:
        return {"width": self.width, "records": self.records, "cells": self.cells}


def usefulness(
    arrays: Sequence[GridArrays],
    occ: Occupancy,
    plan: SlotPlan,
    *,
    statistics: Sequence[str],
    U: float,
    eps: float | Callable[[int], float],
    mechanism: str,
    options: dict[str, str],
    useful_width: float,
    total_records: int,
) -> Usefulness:
    """The usefulness of the plan's released grids (those keeping a user), in order: each
    statistic's expected widths of all of them at once (:func:`app.core.expected_ci95_widths`),
    grid ``i`` at each statistic's ``eps(i)`` (a float: the same for all)."""
    released = [i for i in range(len(arrays)) if plan.caps(occ, i).any()]
    groups: dict[float, list[int]] = {}
    if isinstance(eps, float):
        groups[eps] = list(range(len(released)))
    else:
        for g, i in enumerate(released):
            groups.setdefault(eps(i), []).append(g)
    per_statistic = {s: [0.0] * len(released) for s in statistics}
    for at, members in groups.items():
        counts = [arrays[released[g]].counts for g in members]
        caps = [plan.caps(occ, released[g]) for g in members]
        for s in statistics:
            got = core.expected_ci95_widths(s, counts, caps, U, at, mechanism, options).tolist()
            for g, w in zip(members, got, strict=True):
                per_statistic[s][g] = w
    records = [int(arrays[i].counts.sum()) for i in released]
    widths = [{s: per_statistic[s][g] for s in statistics} for g in range(len(released))]
    useful = [max(w.values()) <= useful_width for w in widths]
    useful_records = sum(r for r, ok in zip(records, useful, strict=True) if ok)
    share = useful_records / total_records if total_records else 0.0
    return Usefulness(float(useful_width), share, sum(useful), widths)


def _percent(share: float) -> str:
    return f"{100 * share:.0f}%"


def warnings(
    useful: Usefulness,
    occ: Occupancy,
    plan: SlotPlan,
    *,
    coverage_records: float,
    unit: str | None,
    profile: bool,
) -> list[str]:
    """Plain sentences saying what to change, when most of the release is not useful."""
    out = []
    width = f"{useful.width:g}{' ' + unit if unit else ''}"
    if useful.records < USEFUL_FLOOR:
        levers = "ask user_mean, lower the resolution (h3_resolution, or partition adaptive)"
        more = "pool more days (a profile)" if not profile else "pool more days (a wider profile)"
        out.append(
            f"Only {_percent(useful.records)} of the records fall in cells whose ci95 is at "
            f"most {width} wide; {more}, {levers}, or raise max_user_cost or epsilon."
        )
    pairs = occ.user.size
    suppressed = int(np.count_nonzero(plan.kept == 0)) if pairs else 0
    if pairs and suppressed / pairs > SUPPRESSED_CEILING:
        out.append(
            f"{suppressed} of {pairs} (privacy unit, cell) contributions were suppressed to "
            "keep each unit's cost within the budget; raise max_user_cost, release fewer "
            "slots or a coarser resolution, or pool days (a profile) so that each unit "
            "crosses fewer cells."
        )
    if coverage_records < USEFUL_FLOOR:
        out.append(
            f"Only {_percent(coverage_records)} of the records lie in released cells (the "
            "others have fewer than min_users privacy units); lower min_users, use partition "
            "adaptive, or pool more days (a profile)."
        )
    return out
