"""A whole hour's release next to the peer libraries and the numpy floor, on the same records.

Run ``python benchmarks/hour_peers.py`` (options: ``--records`` (default 10^6),
``--repeats``, ``--skip``, ``--url``). The hour is ``benchmarks/release.py``'s city: ``n/20``
buses, 20 readings each, on ``n/200`` res-8 cells (at 10^6: 50,000 users, 5,000 grids).
Each contender releases a user-level ε-DP mean and variance of every grid, the grids
public, each user capped at ``k`` records per grid:

* ``dpgate``: ``POST /datasets/{id}/releases`` (mean and variance, Clip-User, every grid,
  each user charged in the ledger) through the in-process HTTP client; ``dpgate engine`` is
  the server's part of it (the release service's call: inputs, plan, draw, ledger, store),
  without the HTTP layer and the client's decoding;
* ``numpy floor``: each user's first ``k`` records per grid, sums and sums of squares by
  ``bincount``, one Laplace vector (numpy's, as a floor: dpgate draws from OpenDP);
* ``OpenDP loop``: per grid, OpenDP's ``make_mean`` and ``make_variance`` on the grid's
  capped vector, each chained to ``then_laplace`` (the scale from the transformation's
  own map at ``d_in = 2k``; built once per vector length) and invoked;
* ``PipelineDP``: ``DPEngine.aggregate`` on its ``LocalBackend``, metrics MEAN and
  VARIANCE, the grids as public partitions, ``max_partitions_contributed`` the most grids
  any user visits, ``max_contributions_per_partition`` ``k``, Laplace noise.

``k`` is the median of the users' records per grid (public occupancy). Prints the median
of ``--repeats`` runs of each and each contender's time over dpgate's engine. OpenDP's
Polars front end is left out: with OpenDP 0.16 and its pinned Polars its user-level
group-by (``truncate_num_groups``) fails to resolve its own plan.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from app.releases import service as release_service  # noqa: E402
from benchmarks.postgres import PG_URL, fresh_database  # noqa: E402
from benchmarks.release import ADMIN, SLOT, city_arrays, city_csv, post, timed  # noqa: E402

U = 30.0
EPSILON = 0.1


def capped(user: np.ndarray, grid: np.ndarray, k: int) -> np.ndarray:
    """The mask of each user's first ``k`` records in each grid (records in time order)."""
    order = np.lexsort((np.arange(user.size), user, grid))
    key = grid[order].astype(np.int64) * (int(user.max()) + 1) + user[order]
    start = np.r_[True, key[1:] != key[:-1]]
    run_start = np.maximum.accumulate(np.where(start, np.arange(key.size), 0))
    keep = np.zeros(user.size, dtype=bool)
    keep[order] = np.arange(key.size) - run_start < k
    return keep


def numpy_floor(user: np.ndarray, grid: np.ndarray, value: np.ndarray, k: int) -> np.ndarray:
    keep = capped(user, grid, k)
    g, v = grid[keep], value[keep]
    n_grids = int(grid.max()) + 1
    count = np.bincount(g, minlength=n_grids)
    total = np.bincount(g, weights=v, minlength=n_grids)
    squares = np.bincount(g, weights=v * v, minlength=n_grids)
    rng = np.random.default_rng()
    c = np.maximum(count, 1)
    mean = (total + rng.laplace(0, k * U / EPSILON, n_grids)) / c
    second = (squares + rng.laplace(0, k * U * U / EPSILON, n_grids)) / c
    return np.stack([mean, second - mean * mean])


def opendp_loop(user: np.ndarray, grid: np.ndarray, value: np.ndarray, k: int) -> list[Any]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    keep = capped(user, grid, k)
    g, v = grid[keep], value[keep]
    order = np.argsort(g, kind="stable")
    bounds = np.searchsorted(g[order], np.arange(int(grid.max()) + 2))
    measurements: dict[int, list[Any]] = {}  # built once per vector length
    out = []
    for i in range(bounds.size - 1):
        vec = v[order[bounds[i] : bounds[i + 1]]].tolist()
        if len(vec) < 2:
            continue
        if len(vec) not in measurements:
            space = (dp.vector_domain(dp.atom_domain(bounds=(0.0, U), nan=False), size=len(vec)),
                     dp.symmetric_distance())  # fmt: skip
            stats = (dp.t.make_mean(*space), dp.t.make_variance(*space))
            # half of ε to each statistic
            measurements[len(vec)] = [
                s >> dp.m.then_laplace(s.map(2 * k) / (EPSILON / 2)) for s in stats
            ]
        out.extend(meas(vec) for meas in measurements[len(vec)])
    return out


def pipeline_dp(user: np.ndarray, grid: np.ndarray, value: np.ndarray, k: int) -> list[Any]:
    import pipeline_dp as pdp

    rows = list(zip(user.tolist(), grid.tolist(), value.tolist(), strict=True))
    per_user = np.bincount(np.unique(user.astype(np.int64) * (int(grid.max()) + 1) + grid)
                           // (int(grid.max()) + 1))  # fmt: skip
    accountant = pdp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0)
    engine = pdp.DPEngine(accountant, pdp.LocalBackend())
    params = pdp.AggregateParams(
        metrics=[pdp.Metrics.MEAN, pdp.Metrics.VARIANCE],
        noise_kind=pdp.NoiseKind.LAPLACE,
        max_partitions_contributed=int(per_user.max()),
        max_contributions_per_partition=k,
        min_value=0.0,
        max_value=U,
    )
    extractors = pdp.DataExtractors(
        privacy_id_extractor=lambda r: r[0],
        partition_extractor=lambda r: r[1],
        value_extractor=lambda r: r[2],
    )
    result = engine.aggregate(rows, params, extractors, public_partitions=np.unique(grid).tolist())
    accountant.compute_budgets()
    return list(result)


def dpgate(url: str, n_records: int, repeats: int) -> dict[str, float]:
    """The release through HTTP, and the release service's own time inside it."""
    spent: list[float] = []
    inner = release_service.release_slot

    def timed_release(*args: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            spent.append(time.perf_counter() - start)

    settings = Settings(database_url=url, admin_key=ADMIN, secret_key="bench-secret")
    upgrade(url)
    release_service.release_slot = timed_release  # type: ignore[assignment]
    try:
        with TestClient(create_app(settings)) as client:
            client.headers["Authorization"] = f"Bearer {ADMIN}"
            ds = client.post("/datasets", json={
                "name": "hour", "value_bound": U, "budget_per_user": 1e6,
                "max_epsilon_per_query": 10.0,
            }).json()["id"]  # fmt: skip
            client.post(f"/datasets/{ds}/records", content=city_csv(n_records),
                        headers={"Content-Type": "text/csv"})  # fmt: skip
            body = {"slot_start": SLOT, "min_users": 1, "clip_user": True}
            path = f"/datasets/{ds}/releases"
            post(client, path, {**body, "epsilon": EPSILON - 1e-6})  # warm the grid cache
            spent.clear()
            http = [timed(lambda i=i: post(client, path, {**body, "epsilon": EPSILON + i * 1e-6}))
                    for i in range(repeats)]  # fmt: skip
    finally:
        release_service.release_slot = inner  # type: ignore[assignment]
    return {"dpgate (HTTP)": statistics.median(http), "dpgate engine": statistics.median(spent)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], help="contenders to leave out")
    parser.add_argument("--url", default=PG_URL, help="Postgres server URL (a fresh schema)")
    args = parser.parse_args()

    user, grid, value = city_arrays(args.records)
    pairs = grid.astype(np.int64) * (int(user.max()) + 1) + user
    per_grid = np.unique(pairs, return_counts=True)[1]
    k = max(1, int(np.median(per_grid)))
    print(f"{args.records:,} records, {np.unique(user).size:,} users, "
          f"{np.unique(grid).size:,} grids, k = {k}", flush=True)  # fmt: skip
    peers: dict[str, Callable[[], Any]] = {
        "numpy floor": lambda: numpy_floor(user, grid, value, k),
        "OpenDP loop": lambda: opendp_loop(user, grid, value, k),
        "PipelineDP": lambda: pipeline_dp(user, grid, value, k),
    }
    res: dict[str, float] = {}
    if "dpgate" not in args.skip:
        with tempfile.TemporaryDirectory() as tmp:
            url, drop = fresh_database("postgres", Path(tmp), args.url)
            try:
                res.update(dpgate(url, args.records, args.repeats))
            finally:
                drop()
    for name, run in peers.items():
        if name in args.skip:
            continue
        run()  # warm: imports, OpenDP's library
        res[name] = statistics.median(timed(run) for _ in range(args.repeats))
        print(f"  {name}: {res[name]:.3f} s", flush=True)
    base = res.get("dpgate engine")
    print(f"\nmedian seconds over {args.repeats} runs" + (", and / dpgate engine" if base else ""))
    for name, took in res.items():
        print(f"  {name:<16} {took:8.3f}" + (f"   {took / base:6.2f}x" if base else ""))


if __name__ == "__main__":
    main()
