"""Whole-slot release and preview of a synthetic city slot, at res 8 and coarsened to res 7.

Run ``python benchmarks/release.py`` (options: ``--sizes``, ``--repeats``, ``--url``,
``--profile``; ``--only`` to time some cases, e.g. ``--only "release r8"``). For each size
(records; default 10^5, 3·10^5 and 10^6) it builds one hour of a city: ``records/20``
buses (50,000 at 10^6), 20 readings each along a short walk over neighbouring cells of a
res-8 disk of about ``records/200`` cells (5,000 at 10^6), uploads it through the HTTP API
(in-process, a fresh schema on the Postgres server of ``--url``), then times, through HTTP:

* ``preview r8`` / ``preview r7``: ``POST /datasets/{id}/releases/preview`` with
  ``max_user_cost`` (the ε search, Clip-User, expected errors), nothing charged;
* ``release r8`` / ``release r7``: ``POST /datasets/{id}/releases`` with ``epsilon`` (a
  new one per run, so nothing is served from the stored releases), mean and variance;
  Clip-User, every grid released (``min_users`` 1), each charged in the ledger.

The first res-7 request builds the coarser grids from the stored records (timed
apart, as ``coarsen r7``); later ones read them by version from the grid cache.
Prints the median of ``--repeats`` runs of each and the growth between sizes. Answers
are decoded with orjson, as a client of a day's 10^8 bytes would.
``--plan-hours 24`` instead times the planner alone (Clip-User over every grid of a
city-like day of ``--sizes`` records per hour; no database).
Targets (issue 15): at 10^6 records, preview <= 2 s and release <= 5 s; ``adaptive r8``
(``partition: adaptive``, res 8 to 5, ``min_users`` 10) within 1.5× of ``release r8`` (issue 23).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import h3
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from app.releases import service as release_service  # noqa: E402
from benchmarks.postgres import PG_URL, fresh_database  # noqa: E402

ADMIN = "dpg_release_benchmark_admin_key"  # at least 24 characters (app.config)
CENTER = (30.2672, -97.7431)
SLOT = "2024-03-05T08:00:00+00:00"
READINGS = 20


def city_hour(n_records: int, seed: int = 7) -> tuple[list[str], np.ndarray]:
    """One hour of ``n_records`` readings: ``n/20`` buses on walks over a res-8 disk. The
    res-8 cells, and one row per reading: bus, second of the hour, cell index, speed."""
    rng = np.random.default_rng(seed)
    n_buses = n_records // READINGS
    n_cells = max(n_records // 200, 7)
    k = 1
    while 3 * k * (k + 1) + 1 < n_cells:
        k += 1
    cells = sorted(h3.grid_disk(h3.latlng_to_cell(*CENTER, 8), k))[:n_cells]
    index = {c: i for i, c in enumerate(cells)}
    neighbours = [[index[n] for n in h3.grid_disk(c, 1) if n in index] for c in cells]
    rows = np.empty((n_buses * READINGS, 4))
    for bus in range(n_buses):
        cell = int(rng.integers(n_cells))
        seconds = np.sort(rng.choice(3600, size=READINGS, replace=False))
        speeds = np.clip(rng.normal(8.0 + 3 * rng.standard_normal(), 4.0, READINGS), 0, 30)
        for j in range(READINGS):
            if j and rng.random() < 0.2:  # move on to a neighbouring cell
                cell = int(rng.choice(neighbours[cell]))
            rows[bus * READINGS + j] = (bus, seconds[j], cell, speeds[j])
    return cells, rows


def city_arrays(n_records: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`city_hour` as arrays: user, grid (cell index) and value, in time order per
    user, the values as the CSV carries them (3 decimals)."""
    _, rows = city_hour(n_records, seed)
    order = np.lexsort((rows[:, 1], rows[:, 0]))
    rows = rows[order]
    return rows[:, 0].astype(np.int64), rows[:, 2].astype(np.int64), np.round(rows[:, 3], 3)


def city_csv(n_records: int, seed: int = 7) -> bytes:
    """:func:`city_hour` as an upload."""
    cells, rows = city_hour(n_records, seed)
    centres = np.array([h3.cell_to_latlng(c) for c in cells])
    lines = ["user_id,timestamp,lat,lon,value"]
    for bus, second, cell, speed in rows:
        lat, lon = centres[int(cell)]
        ts = f"2024-03-05T08:{int(second) // 60:02d}:{int(second) % 60:02d}+00:00"
        lines.append(f"b{int(bus)},{ts},{lat:.6f},{lon:.6f},{speed:.3f}")
    return ("\n".join(lines) + "\n").encode()


@contextmanager
def server_profiled() -> Iterator[cProfile.Profile]:
    """Profile the release service where it runs (the test client's server thread, which a
    profile of the client's call would only see waiting)."""
    prof = cProfile.Profile()
    originals = {name: getattr(release_service, name) for name in ("release_slot", "preview_slot")}

    def wrap(inner: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args, **kw: prof.runcall(inner, *args, **kw)

    for name, inner in originals.items():
        setattr(release_service, name, wrap(inner))
    try:
        yield prof
    finally:
        for name, inner in originals.items():
            setattr(release_service, name, inner)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def post(client: TestClient, path: str, body: dict) -> dict:
    resp = client.post(path, json=body)
    if resp.status_code != 200:
        raise RuntimeError(f"{path}: {resp.status_code} {resp.text[:300]}")
    # orjson, as a client would for a day's 10^8 bytes (the stdlib's json takes seconds)
    out: dict = orjson.loads(resp.content)
    return out


def run_size(
    url: str, n_records: int, repeats: int, profile: bool, only: list[str] | None = None
) -> dict[str, float]:
    settings = Settings(database_url=url, admin_key=ADMIN, secret_key="bench-secret")
    upgrade(url)
    out: dict[str, float] = {}
    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN}"
        ds = client.post(
            "/datasets",
            json={
                "name": f"city {n_records}",
                "value_bound": 30.0,
                "budget_per_user": 1e6,
                "max_epsilon_per_query": 10.0,
            },
        ).json()["id"]
        data = city_csv(n_records)
        up = timed(
            lambda: client.post(
                f"/datasets/{ds}/records", content=data, headers={"Content-Type": "text/csv"}
            )
        )
        grids = client.get(f"/datasets/{ds}", params={}).json()
        print(
            f"  {n_records:>9,} records: {grids['n_users']:,} users, {grids['n_grids']:,} "
            f"res-8 grids (upload {up:.1f} s)",
            flush=True,
        )
        base = {"slot_start": SLOT, "min_users": 1, "clip_user": True}
        r7 = {"h3_resolution": 7}
        adaptive = {"partition": "adaptive", "min_users": 10}
        if not only or any(n.endswith("r7") for n in only):
            out["coarsen r7"] = timed(
                lambda: client.get(f"/datasets/{ds}/grids", params={**r7, "limit": 1})
            )
        cases: dict[str, Callable[[int], dict]] = {
            "preview r8": lambda i: post(
                client, f"/datasets/{ds}/releases/preview", {**base, "max_user_cost": 1.0}
            ),
            "preview r7": lambda i: post(
                client, f"/datasets/{ds}/releases/preview", {**base, **r7, "max_user_cost": 1.0}
            ),
            "release r8": lambda i: post(
                client, f"/datasets/{ds}/releases", {**base, "epsilon": 0.1 + i * 1e-6}
            ),
            "release r7": lambda i: post(
                client, f"/datasets/{ds}/releases", {**base, **r7, "epsilon": 0.1 + i * 1e-6}
            ),
            # res 8 down to 5 (issue 23): the partition, then the same release steps
            "adaptive r8": lambda i: post(
                client, f"/datasets/{ds}/releases", {**base, **adaptive, "epsilon": 0.1 + i * 1e-6}
            ),
            "adaptive cost": lambda i: post(
                client,
                f"/datasets/{ds}/releases",
                {**base, **adaptive, "max_user_cost": 1.0 + i * 1e-6},
            ),
        }
        for name, fn in cases.items():
            if only and name not in only:
                continue
            fn(-1)  # warm: grid cache, Clip-User's imports
            if profile:
                print(f"--- profile of {name} (the server's work, in its thread)")
                with server_profiled() as prof:
                    fn(-2)
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            out[name] = statistics.median(timed(partial(fn, i)) for i in range(repeats))
    return out


def day_occupancy(n_records: int, hours: int, seed: int = 7) -> Any:
    """A city-like day for the planner alone: each hour, ``n/20`` buses (the same ids every
    hour) each read 20 times along 1 + Binomial(19, 0.2) cells of a ring of ``n/200``
    cells (the city's walk: a move with probability 0.2 per reading), hour ``h``'s grids
    numbered apart; the (grid, user, count) pairs as a release's :class:`Occupancy`."""
    from app.releases.planning import Occupancy

    rng = np.random.default_rng(seed)
    n_bus, n_cells = n_records // READINGS, max(n_records // 200, 7)
    keys, counts = [], []
    for hour in range(hours):
        k = 1 + rng.binomial(READINGS - 1, 0.2, size=n_bus)  # cells visited this hour
        bus = np.repeat(np.arange(n_bus), k)
        first = np.concatenate([[0], np.cumsum(k)[:-1]])
        step = np.arange(bus.size) - np.repeat(first, k)
        cell = (np.repeat(rng.integers(n_cells, size=n_bus), k) + 3 * step) % n_cells
        cnt = np.ones(bus.size, dtype=np.int64)
        cnt[first] += READINGS - k  # the rest of the bus's readings in its first cell
        keys.append((hour * n_cells + cell) * n_bus + bus)
        counts.append(cnt)
    uniq, inv = np.unique(np.concatenate(keys), return_inverse=True)
    count = np.bincount(inv, weights=np.concatenate(counts)).astype(np.int64)
    grid_of = uniq // n_bus
    grid_ids, grid = np.unique(grid_of, return_inverse=True)
    bounds = np.searchsorted(grid, np.arange(grid_ids.size + 1))
    return Occupancy(grid=grid.astype(np.int64), user=uniq % n_bus, count=count, bounds=bounds)


def plan_day(n_records: int, hours: int, repeats: int) -> None:
    """Time the planner (Clip-User over every grid of ``hours`` slots) at two epsilons."""
    from app.answers.epsilon import EpsilonAmount, parse_epsilon
    from app.releases.planning import PlanOptions, SlotPlan, draft_at

    occ = day_occupancy(n_records, hours)
    print(f"plan of {hours} h x {n_records:,} records: {occ.user.size:,} pairs, "
          f"{occ.bounds.size - 1:,} grids")  # fmt: skip

    def planned(e: EpsilonAmount) -> SlotPlan:
        return draft_at(occ, None, 30.0, e, PlanOptions(clip_user=True)).done()

    for eps in (0.1, 1.0):
        run = partial(planned, parse_epsilon(eps))
        plan = run()  # also compiles Clip-User's stages on a first run
        took = statistics.median(timed(run) for _ in range(repeats))
        print(f"  eps {eps}: {took:.2f} s (G1 {plan.G1}, K {plan.K})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--url", default=PG_URL, help="Postgres server URL (each size gets a fresh schema)"
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only", nargs="+", help='time these cases only, e.g. "release r8"')
    parser.add_argument(
        "--plan-hours", type=int, default=0,
        help="instead: time the planner alone on this many hours of a city-like day",
    )  # fmt: skip
    args = parser.parse_args()
    if args.plan_hours:
        plan_day(args.sizes[-1], args.plan_hours, args.repeats)
        return
    rows: list[tuple[int, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            url, drop = fresh_database("postgres", Path(tmp), args.url)
            try:
                rows.append((size, run_size(url, size, args.repeats, args.profile, args.only)))
            finally:
                drop()
    names = list(rows[0][1])
    print(f"\nmedian seconds over {args.repeats} runs (coarsen r7: once)")
    print(f"{'records':>10} " + " ".join(f"{n:>12}" for n in names))
    for size, res in rows:
        print(f"{size:>10,} " + " ".join(f"{res[n]:>12.3f}" for n in names))
    for (s0, a), (s1, b) in itertools.pairwise(rows):
        growth = " ".join(f"{b[n] / a[n]:>12.2f}" for n in names)
        print(f"{'x' + format(s1 / s0, '.1f'):>10} {growth}")
    if rows[-1][0] >= 1_000_000 and not args.only:
        res = rows[-1][1]
        ok = (
            max(res["preview r8"], res["preview r7"]) <= 2
            and max(res["release r8"], res["release r7"]) <= 5
        )
        print(f"targets at 10^6 (preview <= 2 s, release <= 5 s): {'met' if ok else 'NOT met'}")
        ratio = res["adaptive r8"] / res["release r8"]
        print(f"adaptive / fixed res-8 release: {ratio:.2f} (issue 23: <= 1.5)")


if __name__ == "__main__":
    main()
