"""How often each released cell's ci95 holds the truth over many releases of the same
typical-day profiles (the shared CapMetrics days, ``benchmarks/profile_release.py``'s
set-up): the partition and the plan read public counts only, so every release has the
same cells and only the noise differs; each cell's misses are counted.

Run ``python benchmarks/profile_coverage.py --releases 60`` (``--statistics``,
``--partition adaptive|fixed r7``). Prints, per profile, the cells, the misses over all
cells and releases with a two-sided 95% Clopper-Pearson interval for the coverage, the
misses by whether the cell suppresses units and by its epsilon, and the cells missed most
(the most missed one's binomial tail, Bonferroni over the cells).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

import h3
from scipy.stats import beta, binom

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.postgres import PG_URL  # noqa: E402
from benchmarks.profile_release import (  # noqa: E402
    COST,
    DAYS,
    MIN_USERS,
    PARTITIONS,
    PROFILES,
    load_days,
    served,
)


def clopper_pearson(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    a = 1 - conf
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def truths(rows: list, cells: set[str], statistic: str) -> dict[str, float]:
    """Each released cell's true ``mean`` (of its records) or ``user_mean`` (of its units'
    means), as ``benchmarks.city_release.score`` counts them."""
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for bus, fine, v in rows:
        for r in range(5, 9):
            c = h3.cell_to_parent(fine, r)
            if c in cells:
                per[c][bus].append(v)
    if statistic == "mean":
        return {c: statistics.fmean(v for vs in u.values() for v in vs) for c, u in per.items()}
    return {c: statistics.fmean(statistics.fmean(vs) for vs in u.values()) for c, u in per.items()}


def report(name: str, truth: dict[str, float], info: dict[str, tuple[float, int, int]],
           miss: dict[str, int], releases: int) -> tuple[int, int]:  # fmt: skip
    """Print one profile's figures; its (misses, trials)."""
    n, k = releases * len(truth), sum(miss.values())
    lo, hi = clopper_pearson(n - k, n)
    print(f"{name}: {len(truth)} cells x {releases}: misses {k}/{n}, coverage {1 - k / n:.4f} "
          f"(95% CI {lo:.4f}..{hi:.4f}); P(>= {k} | Bin({n}, 0.05)) "
          f"{binom.sf(k - 1, n, 0.05):.3g}")  # fmt: skip
    for label, cs in (("suppressing", [c for c in truth if info[c][2] > 0]),
                      ("keeping all", [c for c in truth if info[c][2] == 0])):  # fmt: skip
        if cs:
            kk = sum(miss[c] for c in cs)
            print(f"  {label:<12} {len(cs):3d} cells  misses {kk}/{len(cs) * releases}")
    by_eps: dict[float, list[str]] = defaultdict(list)
    for c in truth:
        by_eps[info[c][0]].append(c)
    print("  by epsilon: " + ", ".join(
        f"{e:g}: {sum(miss[c] for c in cs)}/{len(cs) * releases}"
        for e, cs in sorted(by_eps.items())))  # fmt: skip
    worst = sorted(truth, key=lambda c: -miss[c])[:3]
    print("  most missed: " + ", ".join(
        f"{c} eps {info[c][0]:g} L {info[c][1]} s {info[c][2]}: {miss[c]}"
        for c in worst))  # fmt: skip
    p = float(binom.sf(miss[worst[0]] - 1, releases, 0.05))
    print(f"  most missed cell: P(>= {miss[worst[0]]} | Bin({releases}, 0.05)) {p:.3g}, "
          f"times {len(truth)} cells (Bonferroni) {p * len(truth):.3g}", flush=True)  # fmt: skip
    return k, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", type=int, default=60)
    parser.add_argument("--statistics", nargs="+", default=["user_mean"])
    parser.add_argument("--partition", default="adaptive")
    parser.add_argument("--url", default=PG_URL)
    args = parser.parse_args()
    stat = args.statistics[0]
    with served(args.url) as client:
        ds, units = load_days(client)
        base = {"min_users": MIN_USERS, "max_user_cost": COST, "statistics": args.statistics}
        total_miss = total_n = 0
        for name, profile in PROFILES.items():
            first, last = date.fromisoformat(profile["from"]), date.fromisoformat(profile["to"])
            rows = [
                r for day in DAYS
                if first <= date.fromisoformat(day) <= last
                and (profile["days"] == "all" or date.fromisoformat(day).isoweekday() <= 5)
                for r in units[day]
            ]  # fmt: skip
            body = {**base, "slot_start": "08:00", "profile": profile,
                    **PARTITIONS[args.partition]}  # fmt: skip
            miss: dict[str, int] = defaultdict(int)
            info: dict[str, tuple[float, int, int]] = {}
            truth: dict[str, float] = {}
            for _ in range(args.releases):
                client.post(f"/datasets/{ds}/budget/reset", json={"reason": "bench"})
                out = client.post(f"/datasets/{ds}/releases", json=body)
                out.raise_for_status()
                grids = out.json()["grids"]
                cells = {g["h3_cell"] for g in grids}
                if not truth:
                    truth = truths(rows, cells, stat)
                    info = {g["h3_cell"]: (g[stat]["epsilon"], g["n_users"],
                                           g["n_users_suppressed"]) for g in grids}  # fmt: skip
                if cells != set(truth):
                    raise AssertionError("the cells differ between releases")
                for g in grids:
                    lo, hi = g[stat]["ci95"]
                    miss[g["h3_cell"]] += not lo <= truth[g["h3_cell"]] <= hi
            k, n = report(name, truth, info, miss, args.releases)
            total_miss, total_n = total_miss + k, total_n + n
        lo, hi = clopper_pearson(total_n - total_miss, total_n)
        print(f"all: misses {total_miss}/{total_n}, coverage {1 - total_miss / total_n:.4f} "
              f"(95% CI {lo:.4f}..{hi:.4f})")  # fmt: skip


if __name__ == "__main__":
    main()
