"""HTTP throughput and latency of DP mean queries against Postgres (issue 5).

Starts ``dpgate serve --workers 2`` on a fresh Postgres schema, loads a synthetic
city (40 grids of 30 users), then drives it with 32 concurrent connections:

* uncached: every request is a distinct query (a new epsilon), so each one runs the
  mechanism, locks the grid's 30 budget accounts, charges them and commits;
* cached: a fixed set of queries already answered, served from the stored answers;
* floor (wrk only): ``benchmarks/api_floor.py``, a minimal FastAPI application on the same
  uvicorn and workers doing one INSERT per request through a psycopg pool, measured in the
  same run just before each uncached phase; the ratio uncached/floor is printed per run.

The client is ``wrk`` (2 threads; C, so it leaves the two cores to the server and
Postgres) with a Lua script that makes every uncached request unique; without
``wrk`` on the PATH it falls back to httpx in two processes (which costs the
server about half a core, so its figures are lower; ``apt install wrk``). After
``--warmup`` seconds of unreported load it prints each run and the median of
``--runs`` runs: answered queries per second, p50 and p99 latency, and the CPU
milliseconds per answered query spent by the server's processes and by the
Postgres backends (from ``/proc``; a local server and Postgres only).
Targets: >= 500 uncached answers/s with p99 <= 100 ms and >= 0.35x the floor; >= 2,000 cached
answers/s.

    python benchmarks/api.py [--runs 5] [--seconds 10] [--warmup 5] [--url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db.liveness import conninfo_from_url  # noqa: E402
from benchmarks.api_floor import start_floor  # noqa: E402
from benchmarks.http_load import drive_httpx  # noqa: E402
from benchmarks.postgres import schema_url  # noqa: E402
from tests.conftest import ADMIN_KEY  # noqa: E402
from tests.live_server import free_port, start_server  # noqa: E402

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CACHED_SET = 400  # distinct queries cycled through by the cached phase

# {base} makes every run's epsilons new; each wrk thread and connection counts its own.
WRK_SCRIPT = """
local threads, n = {}, 0
function setup(thread) thread:set("tid", #threads); table.insert(threads, thread) end
function init(args)
  paths = {}
  for line in io.lines(args[1]) do table.insert(paths, line) end
  mode, base = args[2], tonumber(args[3])
  wrk.headers["Authorization"] = "Bearer " .. args[4]
end
function request()
  n = n + 1
  local p = paths[(n + tid * 7919) % #paths + 1]
  if mode == "cached" then return wrk.format("GET", p) end
  local eps = string.format("%.9f", 0.001 + 1e-9 * (base + tid * 10000000 + n))
  return wrk.format("GET", p .. "&epsilon=" .. eps)
end
"""


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


def _wrk(
    url: str,
    paths: list[str],
    mode: str,
    base: int,
    args: argparse.Namespace,
    *,
    seconds: int | None = None,
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        script, listing = Path(tmp) / "load.lua", Path(tmp) / "paths.txt"
        script.write_text(WRK_SCRIPT)
        listing.write_text("\n".join(paths) + "\n")
        out = subprocess.run(
            [
                "wrk",
                "-t2",
                f"-c{args.clients}",
                f"-d{seconds or args.seconds}s",
                "--latency",
                "-s",
                str(script),
                url,
                "--",
                str(listing),
                mode,
                str(base),
                ADMIN_KEY,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))
    secs = float(re.search(r"requests in ([\d.]+)s", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    if bad or errors:
        print(
            f"  ({mode}: {bad.group(1) if bad else 0} non-2xx; socket errors: "
            f"{errors.group(1) if errors else 'none'})"
        )
    answered = total - (int(bad.group(1)) if bad else 0)
    return {
        "answered": answered,
        "answered_per_s": answered / secs,
        "p50_ms": _ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1)),
        "p99_ms": _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1)),
    }


class CpuMeter:
    """CPU time of the server's processes and of the Postgres backends of its database,
    read from ``/proc`` (so only for a server and a Postgres on this machine): where a
    query's milliseconds go. ``sample`` is ``None`` where ``/proc`` cannot be read."""

    def __init__(self, server_pid: int, admin: Engine) -> None:
        self.server_pid, self.admin = server_pid, admin
        self.tick = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _stat(pid: int) -> list[str] | None:
        try:  # the fields after the command name (which may hold spaces)
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None

    def _cpu(self, pids: list[int]) -> dict[int, float]:
        """Seconds of CPU (user + system) so far, per process that still exists."""
        stats = {pid: self._stat(pid) for pid in pids}
        return {pid: (int(st[11]) + int(st[12])) / self.tick for pid, st in stats.items() if st}

    def sample(self) -> tuple[dict[int, float], dict[int, float]] | None:
        if not Path("/proc/self/stat").exists():
            return None
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
        groups = {pid: self._stat(pid) for pid in pids}
        server = [pid for pid, st in groups.items() if st and int(st[2]) == self.server_pid]
        with self.admin.connect() as conn:
            backends = list(
                conn.exec_driver_sql(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                ).scalars()
            )
        return self._cpu(server), self._cpu(backends)


def _spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two samples (a process that started in between counts whole)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def _measured(meter: CpuMeter, phase: Callable[..., dict], *args: Any) -> dict:
    """Run one load phase; add the server's and Postgres' CPU ms per answered query."""
    before = meter.sample()
    out = phase(*args)
    after = meter.sample()
    if before is not None and after is not None and out["answered"]:
        out["server_cpu_ms"] = 1000 * _spent(before[0], after[0]) / out["answered"]
        out["postgres_cpu_ms"] = 1000 * _spent(before[1], after[1]) / out["answered"]
    return out


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=DEFAULT_URL)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10, help="length of each phase (wrk)")
    ap.add_argument(
        "--warmup",
        type=int,
        default=5,
        help="seconds of unreported uncached load first (wrk): pools, prepared statements",
    )
    ap.add_argument("--requests", type=int, default=4000, help="requests per phase (httpx)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--log-level",
        default="warning",
        help="the server's; info writes an access line per request (DPGATE_LOG_FORMAT: json "
        "or text)",
    )
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--client", choices=("auto", "wrk", "httpx"), default="auto")
    args = ap.parse_args()
    use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk"))

    schema = "bench_" + uuid.uuid4().hex[:8]
    admin = create_engine(args.url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    url = schema_url(args.url, schema)
    workdir = Path(tempfile.mkdtemp(prefix="dpgate-bench-"))
    server = start_server(
        url,
        workdir,
        workers=args.workers,
        log_level=args.log_level,
    )
    floor = None
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
            ).json()["id"]
            up = c.post(
                f"/datasets/{ds}/records",
                content=city_csv().encode(),
                headers={"content-type": "text/csv"},
            )
            assert up.status_code == 200, up.text
            grids = [g["grid_id"] for g in c.get(f"/datasets/{ds}/grids").json()["grids"]]
            paths = [f"/grids/{g}/mean?mechanism=clip" for g in grids]
            cached = [
                f"{paths[i % len(paths)]}&epsilon={0.5 + 1e-4 * i:.4f}" for i in range(CACHED_SET)
            ]
            for p in cached:  # answer (and charge) each cached query once
                assert c.get(p).status_code == 200
        client = "wrk" if use_wrk else "httpx"
        with admin.connect() as conn:
            autovacuum = conn.exec_driver_sql("SHOW autovacuum").scalar_one()
        print(
            f"{len(grids)} grids; {args.workers} server workers; {args.clients} "
            f"connections; client {client}; {os.cpu_count()} CPUs shared by server, "
            f"Postgres and client; Postgres autovacuum {autovacuum}"
        )
        if use_wrk:
            port = free_port()
            floor = start_floor(conninfo_from_url(url), port, args.workers, workdir / "floor.log")
            floor_url, floor_paths = f"http://127.0.0.1:{port}", [f"/floor/{g}?k=1" for g in grids]
            floor_meter = CpuMeter(floor.pid, admin)
        if use_wrk and args.warmup > 0:
            _wrk(server.url, paths, "uncached", 99 * 10**8, args, seconds=args.warmup)
            _wrk(floor_url, floor_paths, "uncached", 99 * 10**8, args, seconds=args.warmup)
        meter = CpuMeter(server.process.pid, admin)
        rows, floors = [], []
        for run in range(args.runs):
            if use_wrk:
                base = run * 10**8
                floors.append(
                    _measured(floor_meter, _wrk, floor_url, floor_paths, "uncached", base, args)
                )
                unc = _measured(meter, _wrk, server.url, paths, "uncached", base, args)
                hit = _measured(meter, _wrk, server.url, cached, "cached", 0, args)
            else:
                jobs = [
                    f"{paths[i % len(paths)]}&epsilon={0.001 + 1e-7 * (run * 10**6 + i):.9f}"
                    for i in range(args.requests)
                ]
                repeats = cached * (args.requests // CACHED_SET)
                unc = _measured(meter, drive_httpx, server.url, AUTH, jobs, args.clients)
                hit = _measured(meter, drive_httpx, server.url, AUTH, repeats, args.clients)
            rows.append((unc, hit))
            versus = (
                f" | floor {floors[-1]['answered_per_s']:.0f}/s, uncached "
                f"{unc['answered_per_s'] / floors[-1]['answered_per_s']:.2f}x"
                if floors
                else ""
            )
            print(
                f"run {run + 1}: uncached {unc['answered_per_s']:.0f}/s "
                f"p50 {unc['p50_ms']:.1f} ms p99 {unc['p99_ms']:.1f} ms | "
                f"cached {hit['answered_per_s']:.0f}/s p50 {hit['p50_ms']:.1f} ms "
                f"p99 {hit['p99_ms']:.1f} ms{versus}"
            )

        def med(i: int, k: str) -> float:
            return statistics.median(r[i][k] for r in rows)

        def cpu(i: int, k: str) -> str:
            values = [r[i][k] for r in rows if k in r[i]]
            return f"{statistics.median(values):.2f}" if values else "n/a"

        print(f"\nmedian of {args.runs} runs ({client}):")
        print(
            "| kind | answered/s | p50 ms | p99 ms | server CPU ms/query "
            "| Postgres CPU ms/query | target |"
        )
        print("|---|---|---|---|---|---|---|")
        for i, kind, target in (
            (0, "uncached", ">= 500/s, p99 <= 100 ms"),
            (1, "cached", ">= 2000/s"),
        ):
            print(
                f"| {kind} | {med(i, 'answered_per_s'):.0f} | {med(i, 'p50_ms'):.1f} | "
                f"{med(i, 'p99_ms'):.1f} | {cpu(i, 'server_cpu_ms')} | "
                f"{cpu(i, 'postgres_cpu_ms')} | {target} |"
            )
        if floors:
            fl = [f["answered_per_s"] for f in floors]
            ratios = [r[0]["answered_per_s"] / f for r, f in zip(rows, fl, strict=True)]
            rows = [(f, f) for f in floors]
            print(
                f"| floor (one INSERT, FastAPI) | {statistics.median(fl):.0f} | "
                f"{med(0, 'p50_ms'):.1f} | {med(0, 'p99_ms'):.1f} | {cpu(0, 'server_cpu_ms')} "
                f"| {cpu(0, 'postgres_cpu_ms')} | |"
            )
            print(
                f"\nuncached / floor, per run: {', '.join(f'{r:.2f}' for r in ratios)}; "
                f"median {statistics.median(ratios):.2f}x (target >= 0.35x)"
            )
    finally:
        if floor is not None:
            os.killpg(floor.pid, 9)
            floor.wait(timeout=30)
        server.kill_hard()
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
