"""How many records a release could put in useful cells at all: the floor of docs/math.md
§6.10 on the shared CapMetrics days, from their public occupancy only.

Run ``python benchmarks/useful_floor.py`` (``--statistic mean|user_mean``, ``--cost``).
For each single weekday hour and each profile of ``benchmarks/profile_release.py`` (08:00,
units: bus-days) it prints, as shares of the hour's (or pooled) records:

* ``mass``: the budget-mass bound — a useful cell needs ``L·ε >= 2 ln 20 · U / w`` of
  charge over its kept units, so at most ``C·N·w / (2 ln 20 U)`` cells are useful; the
  records of that many largest cells (res >= 7, or any resolution), ignoring disjointness;
* ``best``: the largest share of records in useful cells over every set of disjoint
  cells (res 7–8, or 5–8) with at least ``min_users`` units, each given the per-cell
  ``ε`` it needs and no unit charged more than ``C`` in all (nobody suppressed), solved
  exactly as an integer programme (scipy's HiGHS);
* ``equal``: the same with one ``ε = C/G1`` for every cell (each unit pays in every cell).
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
        out[f"mass {label}"] = float(np.sort(records)[::-1][:mass_cells].sum()) / total
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--statistic", default="user_mean", choices=("mean", "user_mean"))
    parser.add_argument("--cost", type=float, default=2.0)
    args = parser.parse_args()
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
        f = floor(rows, args.statistic, args.cost)
        print(
            f"{name:<26} units {f['units']:5.0f} G1 {f['G1']:3.0f}  mass cells {f['mass cells']:3.0f}"
            f"  mass r>=7 {f['mass r>=7']:.2f} any {f['mass any']:.2f}"
            f"  best r>=7 {f['best r>=7']:.2f} any {f['best any']:.2f}  equal r8 {f['equal r8']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
