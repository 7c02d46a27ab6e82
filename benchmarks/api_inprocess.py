"""Server CPU per query in process: the application called as raw ASGI, one request at a
time, on a fresh Postgres schema with the city of ``benchmarks/api.py`` (40 grids of 30
users). No HTTP parsing, no client and no other worker share the process, so the CPU each
request costs (``time.process_time``) moves far less with a shared machine's load than
``benchmarks/api.py``'s answers per second; run it from inside two worktrees, alternated,
to compare code (``python benchmarks/api_inprocess.py`` from each root).

* uncached: every request a new epsilon (a release, a charge and a commit);
* cached: one answered query asked again (a look-up, served from the store).

``--profile FILE`` writes a ``cProfile`` of the last round (thread CPU time) for ``pstats``.

    python benchmarks/api_inprocess.py [--requests 1000] [--rounds 3] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import postgres  # noqa: E402
from benchmarks.api import city_csv  # noqa: E402

KEY = "dpg_bench_admin_key_0123456789"
QUERY = b"mechanism=clip&epsilon=%.9f"  # as benchmarks/api.py asks


async def call(
    app: Any, method: str, path: str, query: bytes = b"", body: bytes = b"", kind: bytes = b""
) -> tuple[int, bytes]:
    """One request through the whole ASGI stack (``kind``: the body's type): (status, body)."""
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {KEY}".encode())]
    if body:
        headers += [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query,
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1), "server": ("bench", 80),
        "state": {},
    }  # fmt: skip
    parts: list[bytes] = []
    status = 0
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)  # no disconnect while the answer is made
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(parts)


async def run(url: str, tmp: Path, args: argparse.Namespace) -> None:
    from app.config import Settings
    from app.main import create_app

    settings = Settings(database_url=url, admin_key=KEY, secret_key="bench", secret_file=tmp / "s")
    app = create_app(settings, freeze_gc=True)
    async with app.router.lifespan_context(app):
        spec = {"name": "b", "value_bound": 30, "budget_per_user": 1e6, "max_epsilon_per_query": 10}
        _, made = await call(
            app, "POST", "/datasets", body=orjson.dumps(spec), kind=b"application/json"
        )
        ds = orjson.loads(made)["id"]
        records = city_csv().encode()
        status, text = await call(
            app, "POST", f"/datasets/{ds}/records", body=records, kind=b"text/csv"
        )
        assert status == 200, text
        _, listing = await call(app, "GET", f"/datasets/{ds}/grids")
        grids = [g["grid_id"] for g in orjson.loads(listing)["grids"]]
        for g in grids:  # accounts made and snapshots cached, as in a warm server
            got = await call(app, "GET", f"/grids/{g}/mean", QUERY % 0.9)
            assert got[0] == 200, got
        profile = cProfile.Profile(time.thread_time) if args.profile else None
        cpu: dict[str, list[float]] = {"uncached": [], "cached": []}
        n = args.requests
        for r in range(args.rounds):
            for mode in cpu:
                jobs = [
                    (f"/grids/{grids[i % len(grids)]}/mean", QUERY % eps)
                    for i in range(n)
                    for eps in [0.9 if mode == "cached" else 0.001 + 1e-9 * (r * 10**7 + i)]
                ]
                if profile and r == args.rounds - 1:
                    profile.enable()
                start = time.process_time()
                for path, query in jobs:
                    status, text = await call(app, "GET", path, query)
                    assert status == 200, text
                cpu[mode].append(1000 * (time.process_time() - start) / n)
                if profile and r == args.rounds - 1:
                    profile.disable()
        for mode, ms in cpu.items():
            rounds = ", ".join(f"{m:.3f}" for m in ms)
            print(f"{mode}: CPU ms per request {rounds} (median {statistics.median(ms):.3f})")
        if profile:
            profile.dump_stats(args.profile)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000, help="per round and kind")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", help="write a cProfile of the last round here")
    args = ap.parse_args()
    from app.db.migrate import upgrade

    with tempfile.TemporaryDirectory(prefix="dpgate-bench-") as d:
        url, drop = postgres.fresh_database("postgres", Path(d))
        try:
            upgrade(url)
            asyncio.run(run(url, Path(d), args))
        finally:
            drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
