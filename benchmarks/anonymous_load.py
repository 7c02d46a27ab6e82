"""Analysts' query latency while readers without a key flood the public releases.

Starts ``dpgate serve --workers 2`` on a fresh Postgres schema, loads ``benchmarks/api.py``'s
city (40 grids of 30 users), stores a release of its hour and makes it public. Then, in
alternated rounds (``--rounds``), an analyst's probe asks new (uncached, charged) DP
means one after another for ``--seconds`` seconds, first on an idle server, then while
``wrk`` sends about ``--rate`` anonymous requests a second (``--connections``
connections, each waiting its share of a second between requests): GETs of the public
release, half of them revalidations (``If-None-Match``, a 304), its CSV, the catalogue
and the public listing, each from a random client address (``X-Forwarded-For``, which
uvicorn trusts from 127.0.0.1), so the per-address limit does not hide the load and the
per-process one (``DPGATE_ANONYMOUS_REQUESTS_PER_SECOND``) is what protects the key holders.
Prints, per round, the probe's median and p99 latency idle and loaded, their ratio, what
wrk got (requests a second, the share answered 429) and the CPU the server's processes
spent per anonymous request meanwhile (the probe's few queries included). Target: loaded p50 and p99
within 2x of idle at 2,000 anonymous requests a second for 30 s.

    apt-get install -y wrk
    python benchmarks/anonymous_load.py [--rate 2000] [--seconds 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import create_engine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.api import AUTH, DEFAULT_URL, city_csv  # noqa: E402
from benchmarks.postgres import cpu_seconds, schema_url  # noqa: E402
from tests.live_server import start_server  # noqa: E402

WRK_SCRIPT = """
local n = 0
function init(args)
  local r = "/releases/" .. args[1]
  paths = {r, r, r .. "?format=csv", "/", "/public/releases"}
  etag, pause = args[2], tonumber(args[3])
end
function delay() return pause end
function request()
  n = n + 1
  local headers = {["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.random(0, 255),
                   math.random(0, 255), math.random(1, 254))}
  if n % 5 == 1 then headers["If-None-Match"] = etag end
  return wrk.format("GET", paths[n % #paths + 1], headers)
end
"""


def probe(url: str, grids: list[str], seconds: float, start: int) -> list[float]:
    """New DP means, one after another, for ``seconds``: each one's latency."""
    times: list[float] = []
    with httpx.Client(base_url=url, headers=AUTH, timeout=30, trust_env=False) as c:
        end, i = time.monotonic() + seconds, start
        while time.monotonic() < end:
            i += 1
            path = f"/grids/{grids[i % len(grids)]}/mean"
            t0 = time.perf_counter()
            resp = c.get(path, params={"epsilon": f"{0.001 + 1e-7 * i:.7f}", "mechanism": "clip"})
            times.append(time.perf_counter() - t0)
            assert resp.status_code == 200, resp.text
            time.sleep(0.02)  # an analyst's script, not a flood: ~40 queries a second
    return times


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def server_cpu(pid: int) -> float:
    """CPU seconds so far of the server's process and its workers (a local server)."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return cpu_seconds(pid) + sum(cpu_seconds(w) for w in pids if _parent(w) == pid)


def flood(
    url: str, release: str, etag: str, args: argparse.Namespace, server_pid: int
) -> dict[str, float]:
    pause_ms = max(1, int(1000 * args.connections / args.rate))
    cpu_before = server_cpu(server_pid)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "anonymous.lua"
        script.write_text(WRK_SCRIPT)
        out = subprocess.run(
            ["wrk", "-t2", f"-c{args.connections}", f"-d{args.seconds}s", "-s", str(script),
             url, "--", release, etag, str(pause_ms)],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    total = int(re.search(r"(\d+) requests in", out).group(1))
    secs = float(re.search(r"requests in ([\d.]+)s", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    cpu_ms = 1000 * (server_cpu(server_pid) - cpu_before) / max(total, 1)
    refused = (int(bad.group(1)) if bad else 0) / max(total, 1)
    return {"per_s": total / secs, "refused": refused, "cpu_ms": cpu_ms}


def pct(times: list[float], q: float) -> float:
    return 1000 * sorted(times)[max(0, int(len(times) * q) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=DEFAULT_URL)
    ap.add_argument("--rate", type=int, default=2000, help="anonymous requests a second")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    schema = "anon_" + uuid.uuid4().hex[:8]
    admin = create_engine(args.url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    server = start_server(schema_url(args.url, schema), Path(tempfile.mkdtemp()), workers=2)
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=300) as c:
            spec = {"name": "bench", "value_bound": 30, "value_unit": "m/s",
                    "budget_per_user": 1e6, "max_epsilon_per_query": 10}  # fmt: skip
            ds = c.post("/datasets", json=spec).json()["id"]
            c.post(f"/datasets/{ds}/records", content=city_csv().encode(),
                   headers={"content-type": "text/csv"}).raise_for_status()  # fmt: skip
            grids = [g["grid_id"] for g in c.get(f"/datasets/{ds}/grids").json()["grids"]]
            slot = c.get(f"/datasets/{ds}/grids").json()["grids"][0]["slot_start"]
            made = c.post(f"/datasets/{ds}/releases", json={"slot_start": slot, "epsilon": 0.5})
            release = made.json()["release_id"]
            c.patch(f"/releases/{release}", json={"public": True}).raise_for_status()
            etag = httpx.get(f"{server.url}/releases/{release}").headers["etag"]
        print(f"{len(grids)} grids; public release {release}; 2 workers; wrk at ~{args.rate}/s "
              f"for {args.seconds} s, {args.connections} connections")  # fmt: skip
        probe(server.url, grids, 3, 10**7)  # warm-up
        for r in range(args.rounds):
            idle = probe(server.url, grids, args.seconds, 10**6 * (2 * r + 1))
            got: dict[str, float] = {}
            wrk = threading.Thread(
                target=lambda out=got: out.update(
                    flood(server.url, release, etag, args, server.process.pid)
                )
            )
            wrk.start()
            time.sleep(1)
            loaded = probe(server.url, grids, args.seconds - 2, 10**6 * (2 * r + 2))
            wrk.join()
            print(
                f"  round {r + 1}: idle p50 {pct(idle, 0.5):.1f} ms, p99 {pct(idle, 0.99):.1f} ms; "
                f"loaded p50 {pct(loaded, 0.5):.1f} ms, p99 {pct(loaded, 0.99):.1f} ms "
                f"(x{pct(loaded, 0.5) / pct(idle, 0.5):.2f}, "
                f"x{pct(loaded, 0.99) / pct(idle, 0.99):.2f});"
                f" anonymous {got.get('per_s', 0):.0f}/s, {100 * got.get('refused', 0):.0f}% 429, "
                f"server CPU {got.get('cpu_ms', float('nan')):.3f} ms each",
                flush=True,
            )
        print(f"  probe queries per phase: median {statistics.median([len(idle), len(loaded)])}")
    finally:
        server.kill_hard()
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
