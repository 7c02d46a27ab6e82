"""HTTP throughput and latency of DP mean queries against Postgres (issue 5).

Starts ``dpgate serve --workers 2`` on a fresh Postgres schema, loads a synthetic
city (many grids), then drives it with 32 concurrent clients (httpx, one client
process per 16 connections):

* uncached: every request is a distinct query (a new epsilon), so each one runs the
  mechanism, locks the grid's budget accounts, charges them and commits;
* cached: the same queries again, answered from the stored answers.

Prints, per run and as the median of ``--runs`` runs: answered queries per second,
p50 and p99 latency. Targets: >= 500 uncached answers/s with p99 <= 100 ms;
>= 2,000 cached answers/s.

    python benchmarks/api.py [--runs 5] [--requests 4000] [--url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import ADMIN_KEY  # noqa: E402
from tests.live_server import start_server  # noqa: E402

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def city_csv(n_cells: int = 40, users_per_cell: int = 30, records: int = 20) -> str:
    """A grid of H3 cells in Austin, each with its own users, within one hour."""
    lines = ["user_id,timestamp,lat,lon,value"]
    t0 = datetime(2024, 3, 5, 10, tzinfo=UTC)
    for c in range(n_cells):
        lat, lon = 30.20 + 0.02 * (c % 8), -97.80 + 0.02 * (c // 8)
        for u in range(users_per_cell):
            for r in range(records + (u % 7)):
                ts = (t0 + timedelta(seconds=r * 60 + u)).isoformat()
                lines.append(f"c{c}u{u},{ts},{lat},{lon},{(u * 7 + r) % 25 + 0.5}")
    return "\n".join(lines) + "\n"


def _client_proc(url: str, jobs: list[tuple[str, dict]], conns: int, out: mp.Queue) -> None:
    async def main() -> tuple[list[float], int]:
        lat: list[float] = []
        ok = 0
        queue: asyncio.Queue = asyncio.Queue()
        for j in jobs:
            queue.put_nowait(j)
        limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
        async with httpx.AsyncClient(base_url=url, headers=AUTH, limits=limits, timeout=60) as c:

            async def worker() -> None:
                nonlocal ok
                while not queue.empty():
                    path, params = queue.get_nowait()
                    t = time.perf_counter()
                    r = await c.get(path, params=params)
                    lat.append(time.perf_counter() - t)
                    ok += r.status_code == 200

            await asyncio.gather(*(worker() for _ in range(conns)))
        return lat, ok

    out.put(asyncio.run(main()))


def drive(url: str, jobs: list[tuple[str, dict]], clients: int = 32, procs: int = 2) -> dict:
    """Run ``jobs`` with ``clients`` concurrent connections over ``procs`` processes."""
    out: mp.Queue = mp.Queue()
    shards = [jobs[i::procs] for i in range(procs)]
    ps = [mp.Process(target=_client_proc, args=(url, s, clients // procs, out)) for s in shards]
    t = time.perf_counter()
    for p in ps:
        p.start()
    results = [out.get() for _ in ps]
    wall = time.perf_counter() - t
    for p in ps:
        p.join()
    lat = sorted(x for r in results for x in r[0])
    ok = sum(r[1] for r in results)
    return {
        "answered_per_s": ok / wall,
        "ok": ok,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[int(len(lat) * 0.99) - 1],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=DEFAULT_URL)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clients", type=int, default=32)
    args = ap.parse_args()

    schema = "bench_" + uuid.uuid4().hex[:8]
    admin = create_engine(args.url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    url = make_url(args.url).update_query_dict({"options": f"-csearch_path={schema}"})
    workdir = Path(tempfile.mkdtemp(prefix="dpgate-bench-"))
    server = start_server(url.render_as_string(hide_password=False), workdir, workers=args.workers)
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=300) as c:
            ds = c.post(
                "/datasets",
                json={
                    "name": "bench",
                    "value_bound": 30,
                    "budget_per_user": 1e6,
                    "max_epsilon_per_query": 10,
                },
            )
            ds_id = ds.json()["id"]
            up = c.post(
                f"/datasets/{ds_id}/records",
                content=city_csv().encode(),
                headers={"content-type": "text/csv"},
            )
            assert up.status_code == 200, up.text
            grids = [g["grid_id"] for g in c.get(f"/datasets/{ds_id}/grids").json()["grids"]]
        print(f"{len(grids)} grids; {args.workers} server workers; {args.clients} clients")
        rows = []
        for run in range(args.runs):
            jobs = [
                (
                    f"/grids/{grids[i % len(grids)]}/mean",
                    {
                        "epsilon": round(0.001 + 1e-7 * (run * args.requests + i), 9),
                        "mechanism": "clip",
                    },
                )
                for i in range(args.requests)
            ]
            unc = drive(server.url, jobs, args.clients)
            cached = drive(server.url, jobs, args.clients)
            rows.append((unc, cached))
            print(
                f"run {run + 1}: uncached {unc['answered_per_s']:.0f}/s "
                f"p50 {unc['p50_ms']:.1f} ms p99 {unc['p99_ms']:.1f} ms | "
                f"cached {cached['answered_per_s']:.0f}/s p99 {cached['p99_ms']:.1f} ms"
            )

        def med(i: int, k: str) -> float:
            return statistics.median(r[i][k] for r in rows)

        print(f"\nmedian of {args.runs} runs:")
        print("| kind | answered/s | p50 ms | p99 ms | target |")
        print("|---|---|---|---|---|")
        print(
            f"| uncached | {med(0, 'answered_per_s'):.0f} | {med(0, 'p50_ms'):.1f} | "
            f"{med(0, 'p99_ms'):.1f} | >= 500/s, p99 <= 100 ms |"
        )
        print(
            f"| cached | {med(1, 'answered_per_s'):.0f} | {med(1, 'p50_ms'):.1f} | "
            f"{med(1, 'p99_ms'):.1f} | >= 2000/s |"
        )
    finally:
        server.kill_hard()
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
