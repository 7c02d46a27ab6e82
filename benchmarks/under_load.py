"""Cheap requests under heavy releases: every wait bounded (``app.db.capacity``).

Run ``python benchmarks/under_load.py`` (``--days`` default 10: 10⁷ records of
``benchmarks/growth.py``'s city; ``--releases`` default 6 concurrent releases of
``--slots`` default 6 hours each, ``--rounds`` default 2 of them). A live server (one
worker, ``DPGATE_DB_DEADLINE_SECONDS`` ``--deadline``, default 8) on a fresh schema;
the city is uploaded, one query answered once (to be served cached later). Then the
releases run, each with a new epsilon, while three probes loop until they end:
``GET /datasets/{id}/budget``, ``GET /keys/me`` and the cached query. Prints each
probe's p50/p99/max latency and status counts, and each release's status and time.

Targets: each probe 200 within 1 s at p99; no request longer than the deadline + 1 s
(releases aside, which run); every release 200, or 503 with ``Retry-After``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.growth import START, day_csv  # noqa: E402
from benchmarks.postgres import PG_URL, fresh_database  # noqa: E402
from tests.conftest import ADMIN_KEY  # noqa: E402
from tests.live_server import live_server  # noqa: E402


async def _probe(c: httpx.AsyncClient, path: str, stop: asyncio.Event, out: list) -> None:
    while not stop.is_set():
        start = time.monotonic()
        r = await c.get(path)
        out.append((time.monotonic() - start, r.status_code))
        await asyncio.sleep(0.05)


async def _load(url: str, ds: int, grid: str, args: argparse.Namespace) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as c:
        assert (await c.get(f"/grids/{grid}/mean?epsilon=0.5")).status_code == 200
        probes = {
            "budget": f"/datasets/{ds}/budget",
            "keys/me": "/keys/me",
            "cached query": f"/grids/{grid}/mean?epsilon=0.5",
        }
        seen: dict[str, list] = {k: [] for k in probes}
        releases: list[tuple[float, int, str | None]] = []
        stop = asyncio.Event()

        async def release(i: int) -> None:
            hour = START + timedelta(hours=(i * args.slots) % (24 * args.days - args.slots))
            body = {"slot_start": hour.isoformat(), "slots": args.slots,
                    "epsilon": 0.01 + 0.0001 * i, "min_users": 5}  # fmt: skip
            start = time.monotonic()
            r = await c.post(f"/datasets/{ds}/releases", json=body)
            releases.append((time.monotonic() - start, r.status_code, r.headers.get("Retry-After")))

        tasks = [asyncio.create_task(_probe(c, p, stop, seen[k])) for k, p in probes.items()]
        for r in range(args.rounds):
            await asyncio.gather(*(release(r * args.releases + i) for i in range(args.releases)))
        stop.set()
        await asyncio.gather(*tasks)
    for name, got in seen.items():
        times = sorted(t for t, _ in got)
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        codes = dict(Counter(s for _, s in got))
        print(f"{name:13s} n={len(times):4d} p50 {statistics.median(times):.3f} s  "
              f"p99 {p99:.3f} s  max {times[-1]:.3f} s  {codes}")  # fmt: skip
    for took, status, retry in sorted(releases):
        print(f"release: {status} in {took:.1f} s" + (f" (Retry-After {retry})" if retry else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--releases", type=int, default=6)
    ap.add_argument("--slots", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=8.0)
    ap.add_argument("--url", default=PG_URL)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url, drop = fresh_database("postgres", Path(tmp), args.url)
        try:
            env = {"DPGATE_DB_DEADLINE_SECONDS": str(args.deadline)}
            with live_server(url, Path(tmp), workers=1, extra_env=env, timeout=180) as server:
                headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
                with httpx.Client(base_url=server.url, headers=headers, timeout=600) as c:
                    spec = {"name": "load", "value_bound": 30, "budget_per_user": 1e6}
                    ds = c.post("/datasets", json=spec).json()["id"]
                    for day in range(args.days):
                        r = c.post(f"/datasets/{ds}/records", content=day_csv(day),
                                   headers={"content-type": "text/csv"})  # fmt: skip
                        assert r.status_code == 200, r.text
                    grid = c.get(f"/datasets/{ds}/grids?limit=1").json()["grids"][0]["grid_id"]
                print(f"{args.days * 10**6:,} records loaded", flush=True)
                asyncio.run(_load(server.url, ds, grid, args))
        finally:
            drop()


if __name__ == "__main__":
    main()
