"""Reading a public day release without a key: each format, and a revalidation (304).

Run ``python benchmarks/day_release.py --schema NAME`` once (it uploads a day of the
synthetic city and stores a day release, ~10^5 grids, in Postgres schema ``NAME``), then
``python benchmarks/public_release.py --schema NAME``. It serves that schema with
``dpgate serve`` (``--workers``, default 1), makes the largest stored release public and
times, from a client without a key (httpx, a new connection each time, the whole body
read), ``--repeats`` GETs of each format: JSON as stored zstd frames (what httpx, curl
``--compressed`` and browsers that take zstd get), JSON uncompressed, CSV and GeoJSON
(each uncompressed and as its kept zstd frame: publishing renders them once, in the
background, and a read before that renders them) and the Data Package; then
``--revalidations`` GETs with the body's ETag in ``If-None-Match`` on one kept-alive
connection (each a 304: the round trip bounds the server's time). Prints medians and
each format's first read (and the 304s' p99).
Targets: a day release's GET <= 0.5 s; a 304 <= 5 ms of server time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.day_release import kept_database  # noqa: E402
from benchmarks.postgres import PG_URL  # noqa: E402
from benchmarks.release import ADMIN  # noqa: E402
from tests.live_server import start_server  # noqa: E402

CASES = {  # name: (format, Accept-Encoding)
    "json, zstd": ("json", "zstd"),
    "json": ("json", "identity"),
    "csv": ("csv", "identity"),
    "csv, zstd": ("csv", "zstd"),
    "geojson": ("geojson", "identity"),
    "geojson, zstd": ("geojson", "zstd"),
    "datapackage": ("datapackage", "identity"),
}


def largest_release(admin: httpx.Client) -> tuple[str, int]:
    best = ("", -1)
    for ds in admin.get("/datasets").json()["datasets"]:
        for r in admin.get(f"/datasets/{ds['id']}/releases").json()["releases"]:
            if r["n_grids"] > best[1]:
                best = (r["release_id"], r["n_grids"])
    if best[1] < 0:
        raise SystemExit("no stored release: run benchmarks/day_release.py --schema NAME first")
    return best


def timed_get(url: str, fmt: str, encoding: str) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    with httpx.Client(trust_env=False, timeout=120) as c:
        resp = c.get(url, params={"format": fmt}, headers={"Accept-Encoding": encoding})
        size = len(resp.content)  # decoded, as the reader gets it
    resp.raise_for_status()
    return time.perf_counter() - t0, size, resp.headers["etag"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schema", required=True, help="kept by benchmarks/day_release.py")
    parser.add_argument("--url", default=PG_URL)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--revalidations", type=int, default=500)
    args = parser.parse_args()
    url, new = kept_database(args.schema, args.url)
    if new:
        raise SystemExit(f"schema {args.schema} was empty: run benchmarks/day_release.py first")
    env = {  # the anonymous limits off: this times the server, not its rate limits
        "DPGATE_ADMIN_KEY": ADMIN,
        "DPGATE_SECRET_KEY": "bench-secret",
        "DPGATE_ANONYMOUS_RATE_LIMIT_PER_MINUTE": "0",
        "DPGATE_ANONYMOUS_REQUESTS_PER_SECOND": "0",
    }
    server = start_server(url, Path(tempfile.mkdtemp()), workers=args.workers, extra_env=env)
    try:
        auth = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=120) as admin:
            rid, n_grids = largest_release(admin)
            admin.patch(f"/releases/{rid}", json={"public": True}).raise_for_status()
        release = f"{server.url}/releases/{rid}"
        print(f"release {rid}: {n_grids:,} grids, public; {args.workers} server worker(s)")
        etag = ""
        for name, (fmt, encoding) in CASES.items():
            runs = [timed_get(release, fmt, encoding) for _ in range(args.repeats)]
            wall = statistics.median(r[0] for r in runs)
            print(
                f"  GET {name:<14} {wall:6.2f} s  (first {runs[0][0]:.2f} s; "
                f"{runs[0][1] / 1e6:,.1f} MB read)",
                flush=True,
            )
            etag = etag or runs[0][2]
        with httpx.Client(trust_env=False, timeout=30) as c:
            headers = {"If-None-Match": etag, "Accept-Encoding": "zstd"}
            times = []
            for _ in range(args.revalidations):
                t0 = time.perf_counter()
                resp = c.get(release, headers=headers)
                times.append(time.perf_counter() - t0)
                assert resp.status_code == 304, resp.status_code
        times.sort()
        p99 = times[int(len(times) * 0.99) - 1]
        print(f"  304 round trip: median {1e3 * statistics.median(times):.2f} ms, p99 "
              f"{1e3 * p99:.2f} ms ({args.revalidations} on one connection)")  # fmt: skip
    finally:
        server.kill_hard()


if __name__ == "__main__":
    main()
