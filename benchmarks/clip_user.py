"""Time Clip-User (004 Alg. 1) plus the pseudo-user step (004 eq. 15) as the
occupancy grows.

Run ``python benchmarks/clip_user.py`` (options: ``--repeats N``, ``--sizes ...``,
``--seed S``). For about 10^4, 10^5 and 10^6 occupied (user, grid) pairs it draws
an occupancy with ``pairs/10`` users over ``max(pairs/1000, 20)`` grids (so
10^5 users over 10^3 grids at 10^6 pairs), each user in ``1 + Poisson(9)`` grids
(about 10) drawn uniformly, counts ``Geo(0.05)`` on {1, 2, ...}; then prints the
median wall time of :func:`app.core.planning.clip_user.clip_user` over ``--repeats`` runs
and the ratio between consecutive sizes, for three settings:

* ``eps=1``: few stages run before the first user that cannot be suppressed;
* ``eps=0.1``: many more stages (the error threshold ``E`` is ten times larger);
* ``target=inf``: every removal is allowed, so Alg. 1 runs all the way to K = 1;
  the worst case, about ``Σ_l G_l²/2`` trial removals.

Target (issue 6): <= 5 s at 10^6 pairs and near-linear growth (ratio ~10 per
decade of pairs).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.planning.clip_user import clip_user

U = 65.0
SETTINGS: tuple[tuple[str, float, float | None], ...] = (
    ("eps=1", 1.0, None),
    ("eps=0.1", 0.1, None),
    ("target=inf", 0.1, math.inf),
)


def occupancy(n_pairs: int, rng: np.random.Generator, q: float = 0.05):
    """About ``n_pairs`` (grid, user) pairs: ``n_pairs/10`` users, ``max(n_pairs/1000, 20)``
    grids, ``1 + Poisson(9)`` grids per user, ``Geo(q)`` counts."""
    n_users = max(n_pairs // 10, 1)
    n_grids = max(n_pairs // 1000, 20)
    k = np.minimum(1 + rng.poisson(9, size=n_users), n_grids)
    users = np.repeat(np.arange(n_users, dtype=np.int64), k)
    grids = rng.integers(0, n_grids, size=users.size)
    # Drop repeated (user, grid) draws: each user keeps its distinct grids.
    key = np.unique(users * n_grids + grids)
    users, grids = key // n_grids, key % n_grids
    counts = rng.geometric(q, size=key.size).astype(np.int64)
    return grids, users, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark Clip-User (004 Alg. 1).")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    print(f"Clip-User + pseudo-user step, U = {U:g}, median of {args.repeats} runs")
    medians: dict[str, list[float]] = {name: [] for name, _, _ in SETTINGS}
    for size in args.sizes:
        rng = np.random.default_rng([args.seed, size])
        grids, users, counts = occupancy(size, rng)
        n_users, n_grids = np.unique(users).size, np.unique(grids).size
        print(f"\n{grids.size:,} pairs ({n_users:,} users over {n_grids:,} grids)")
        for name, eps, target in SETTINGS:
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                plan = clip_user(grids, users, counts, U, eps, error_target=target)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            medians[name].append(med)
            print(
                f"  {name:<11} {med:8.3f} s  ({1e6 * med / grids.size:5.2f} µs/pair)  "
                f"G1 = {plan.G1:>2}  K = {plan.K:>2}  removed = {len(plan.removed):,}"
            )

    print("\nratio of median times between consecutive sizes (pairs ratio in brackets)")
    for name, _, _ in SETTINGS:
        ts = medians[name]
        ratios = [
            f"{ts[i + 1] / ts[i]:.1f} [{args.sizes[i + 1] / args.sizes[i]:g}]"
            for i in range(len(ts) - 1)
        ]
        print(f"  {name:<11} " + "  ".join(ratios))
    worst = max(m[-1] for m in medians.values())
    ok = worst <= 5.0 or args.sizes[-1] < 10**6
    print(f"\nlargest size: slowest setting {worst:.2f} s -> {'OK' if ok else 'ABOVE'} 5 s target")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
