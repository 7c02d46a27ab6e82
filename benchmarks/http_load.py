"""An httpx load generator (the fallback client of ``benchmarks/api.py`` without wrk)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time


def _client_proc(url: str, headers: dict, paths: list[str], conns: int, out: mp.Queue) -> None:
    import httpx

    async def main() -> tuple[list[float], int]:
        lat: list[float] = []
        ok = 0
        queue: asyncio.Queue = asyncio.Queue()
        for p in paths:
            queue.put_nowait(p)
        limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
        async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as c:

            async def worker() -> None:
                nonlocal ok
                while not queue.empty():
                    path = queue.get_nowait()
                    t = time.perf_counter()
                    r = await c.get(path)
                    lat.append(time.perf_counter() - t)
                    ok += r.status_code == 200

            await asyncio.gather(*(worker() for _ in range(conns)))
        return lat, ok

    out.put(asyncio.run(main()))


def drive_httpx(url: str, headers: dict, paths: list[str], clients: int, procs: int = 2) -> dict:
    """GET every path with ``clients`` concurrent connections over ``procs`` processes."""
    out: mp.Queue = mp.Queue()
    shards = [paths[i::procs] for i in range(procs)]
    ps = [
        mp.Process(target=_client_proc, args=(url, headers, s, clients // procs, out))
        for s in shards
    ]
    t = time.perf_counter()
    for p in ps:
        p.start()
    results = [out.get() for _ in ps]
    wall = time.perf_counter() - t
    for p in ps:
        p.join()
    lat = sorted(x for r in results for x in r[0])
    return {
        "answered": sum(r[1] for r in results),
        "answered_per_s": sum(r[1] for r in results) / wall,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[int(len(lat) * 0.99) - 1],
    }
