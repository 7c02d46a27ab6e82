"""How many records a release could put in useful cells at all: the floor of docs/math.md
§6.10 on the shared CapMetrics days, from their public occupancy only.

Run ``python benchmarks/useful_floor.py`` (``--statistic mean|user_mean``, ``--cost``).
For each single weekday hour and each profile of ``benchmarks/profile_release.py`` (08:00,
units: bus-days) it prints, as shares of the hour's (or pooled) records:

* ``mass``: the budget-mass bound — a useful cell needs ``L·ε >= 2 ln 20 · U / w`` of
  charge over its kept units, so at most ``M = C·N·w / (2 ln 20 U)`` cells are useful,
  whatever the allocation or suppression; disjoint cells at res >= 7 (or >= 5) lie in
  distinct res-7 (res-5) cells, so they hold at most the records of the ``M`` largest
  of those;
* ``best``: the largest share of records in useful cells over every set of disjoint
  cells (res 7–8, or 5–8) with at least ``min_users`` units, each given the per-cell
  ``ε`` it needs and no unit charged more than ``C`` in all (nobody suppressed), solved
  exactly as an integer programme (scipy's HiGHS);
* ``equal``: the same with one ``ε = C/G1`` for every cell (each unit pays in every cell);
* ``useful with res>=7 >= 1/3`` (``1/2``): the largest useful share of records (any
  resolution 5–8) when at least that share of the covered records lies at res >= 7, cells
  that are not useful released for free (an upper bound: :func:`frontier`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

import h3
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.planning.partition import narrowest_width, user_mean_widths  # noqa: E402
from benchmarks.city_release import DAYS as CITY_DAYS  # noqa: E402
from benchmarks.city_release import hour_rows  # noqa: E402
from benchmarks.profile_release import DAYS, PROFILES  # noqa: E402

U, MIN_USERS, WIDTH = 30.0, 10, 6.0


def width(statistic: str, counts: np.ndarray, eps: float) -> float:
    if statistic == "user_mean":
        return float(user_mean_widths([counts], U, eps)[0])
    return narrowest_width(counts, U, eps)


def needed_eps(statistic: str, counts: np.ndarray, top: float) -> float:
    """The smallest ε (to 1%) at which the cell's public width is at most ``WIDTH``; inf
    when even ``top`` is not enough."""
    if width(statistic, counts, top) > WIDTH:
        return math.inf
    lo, hi = 1e-3, top
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if width(statistic, counts, mid) <= WIDTH else (mid, hi)
    return hi


def cells_of(rows: list[tuple[str, str]], finest_kept: int) -> dict[str, dict[str, int]]:
    """Every cell from res 5 to 8 → its units' record counts."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for unit, fine in rows:
        for r in range(5, 9):
            out[h3.cell_to_parent(fine, r)][unit] += 1
    return {c: dict(u) for c, u in out.items() if len(u) >= MIN_USERS}


def floor(rows: list[tuple[str, str]], statistic: str, cost: float) -> dict[str, float]:
    total = len(rows)
    units = sorted({u for u, _ in rows})
    N = len(units)
    cells = cells_of(rows, 8)
    unit_index = {u: i for i, u in enumerate(units)}
    per_unit_cells: dict[str, int] = defaultdict(int)
    for c, members in cells.items():
        if h3.get_resolution(c) == 8:
            for u in members:
                per_unit_cells[u] += 1
    out: dict[str, float] = {}
    mass_cells = int(cost * N * WIDTH / (2 * math.log(20) * U))
    for label, low in (("r>=7", 7), ("any", 5)):
        chosen = [c for c in cells if h3.get_resolution(c) >= low]
        records = np.array([sum(cells[c].values()) for c in chosen], dtype=float)
        # disjoint cells lie in distinct cells at res ``low``: at most the largest of those
        tops = defaultdict(int)
        for _unit, fine in rows:
            tops[h3.cell_to_parent(fine, low)] += 1
        largest = sorted(tops.values(), reverse=True)[:mass_cells]
        out[f"mass {label}"] = min(1.0, sum(largest) / total)
        need = np.array(
            [needed_eps(statistic, np.array(list(cells[c].values())), cost) for c in chosen]
        )
        ok = np.isfinite(need)
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            out[f"best {label}"] = 0.0
            continue
        rows_i, cols_i, vals = [], [], []
        for j, k in enumerate(idx.tolist()):  # one constraint per unit: Σ ε_c ≤ C
            for u in cells[chosen[k]]:
                rows_i.append(unit_index[u])
                cols_i.append(j)
                vals.append(need[k])
        A = coo_matrix((vals, (rows_i, cols_i)), shape=(N, idx.size)).tocsr()
        cons = [LinearConstraint(A, -np.inf, cost)]
        fine_of: dict[str, list[int]] = defaultdict(list)  # disjointness along each chain
        for j, k in enumerate(idx.tolist()):
            c = chosen[k]
            res = h3.get_resolution(c)
            for f in h3.cell_to_children(c, 8) if res < 8 else [c]:
                fine_of[f].append(j)
        chains = [js for js in fine_of.values() if len(js) > 1]
        if chains:
            r_i = [i for i, js in enumerate(chains) for _ in js]
            c_i = [j for js in chains for j in js]
            D = coo_matrix((np.ones(len(c_i)), (r_i, c_i)), shape=(len(chains), idx.size))
            cons.append(LinearConstraint(D.tocsr(), -np.inf, 1))
        got = milp(
            -records[idx], constraints=cons, integrality=np.ones(idx.size),
            bounds=Bounds(0, 1), options={"time_limit": 60},
        )  # fmt: skip
        out[f"best {label}"] = float(-got.fun) / total if got.x is not None else float("nan")
    G1 = max(per_unit_cells.values())
    fine8 = [c for c in cells if h3.get_resolution(c) == 8]
    eq = sum(
        sum(cells[c].values())
        for c in fine8
        if width(statistic, np.array(list(cells[c].values())), cost / G1) <= WIDTH
    )
    out["equal r8"] = eq / total
    out["units"], out["G1"], out["mass cells"] = N, G1, mass_cells
    return out


def frontier(rows: list[tuple[str, str]], statistic: str, cost: float, share: float) -> float:
    """The largest share of records in useful cells (res 5–8) when at least ``share`` of
    the covered records lie at res >= 7: cells released useful (at the epsilon they need,
    every unit within ``cost``) or not useful (free here, so this is an upper bound),
    disjoint, each with ``min_users`` units; an integer programme."""
    total = len(rows)
    units = sorted({u for u, _ in rows})
    unit_index = {u: i for i, u in enumerate(units)}
    cells = cells_of(rows, 8)
    names = list(cells)
    n = len(names)
    records = np.array([sum(cells[c].values()) for c in names], dtype=float)
    fine = np.array([h3.get_resolution(c) >= 7 for c in names], dtype=float)
    need = np.array([needed_eps(statistic, np.array(list(cells[c].values())), cost) for c in names])
    # variables: x (useful) then y (released, not useful)
    r_i, c_i, vals = [], [], []
    for j in np.flatnonzero(np.isfinite(need)).tolist():
        for u in cells[names[j]]:
            r_i.append(unit_index[u])
            c_i.append(j)
            vals.append(need[j])
    A = coo_matrix((vals, (r_i, c_i)), shape=(len(units), 2 * n)).tocsr()
    cons = [LinearConstraint(A, -np.inf, cost)]
    fine_of: dict[str, list[int]] = defaultdict(list)
    for j, c in enumerate(names):
        res = h3.get_resolution(c)
        for f in h3.cell_to_children(c, 8) if res < 8 else [c]:
            fine_of[f].append(j)
    chains = list(fine_of.values())
    d_r = [i for i, js in enumerate(chains) for _ in js for _ in (0, 1)]
    d_c = [j + o for js in chains for j in js for o in (0, n)]
    D = coo_matrix((np.ones(len(d_c)), (d_r, d_c)), shape=(len(chains), 2 * n))
    cons.append(LinearConstraint(D.tocsr(), -np.inf, 1))
    mix = np.concatenate([records * (fine - share)] * 2)
    cons.append(LinearConstraint(mix.reshape(1, -1), 0, np.inf))
    upper = np.concatenate([np.isfinite(need).astype(float), np.ones(n)])
    got = milp(
        -np.concatenate([records, np.zeros(n)]), constraints=cons,
        integrality=np.ones(2 * n), bounds=Bounds(0, upper), options={"time_limit": 60},
    )  # fmt: skip
    return float(-got.fun) / total if got.x is not None else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--statistic", default="user_mean", choices=("mean", "user_mean"))
    parser.add_argument("--cost", type=float, default=2.0)
    parser.add_argument(
        "--city", action="store_true", help="the hours of benchmarks/city_release.py instead"
    )
    args = parser.parse_args()
    if args.city:
        hours = {f"hour {d} {h:02d}:00": [(b, c) for b, c, _ in hour_rows(d, h)]
                 for d in CITY_DAYS for h in (8, 17)}  # fmt: skip
        print(f"statistic {args.statistic}, cost {args.cost}, useful width {WIDTH} of U = {U}")
        for name, rows in hours.items():
            if rows:
                _report(name, rows, args.statistic, args.cost)
        return
    units = {d: [(f"{b}@{d}", cell) for b, cell, _ in hour_rows(d, 8)] for d in DAYS}
    configs = {f"hour {d}": units[d] for d in DAYS if date.fromisoformat(d).isoweekday() <= 5}
    for name, p in PROFILES.items():
        first, last = date.fromisoformat(p["from"]), date.fromisoformat(p["to"])
        configs[name] = [
            r for d in DAYS
            if first <= date.fromisoformat(d) <= last
            and (p["days"] == "all" or date.fromisoformat(d).isoweekday() <= 5)
            for r in units[d]
        ]  # fmt: skip
    print(f"statistic {args.statistic}, cost {args.cost}, useful width {WIDTH} of U = {U}")
    for name, rows in configs.items():
        _report(name, rows, args.statistic, args.cost)


def _report(name: str, rows: list[tuple[str, str]], statistic: str, cost: float) -> None:
    f = floor(rows, statistic, cost)
    print(
        f"{name:<26} units {f['units']:5.0f} G1 {f['G1']:3.0f}  mass cells "
        f"{f['mass cells']:3.0f}  mass r>=7 {f['mass r>=7']:.2f}  best r>=7 "
        f"{f['best r>=7']:.2f} any {f['best any']:.2f}  equal r8 {f['equal r8']:.2f}  useful "
        f"with res>=7 >= 1/3: {frontier(rows, statistic, cost, 1 / 3):.2f}, >= 1/2: "
        f"{frontier(rows, statistic, cost, 1 / 2):.2f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
