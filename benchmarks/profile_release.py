"""Typical-day profiles against single hours on the shared CapMetrics days, and the speed of
a 20-day profile on a synthetic month.

Run ``python benchmarks/profile_release.py`` (options ``--releases``, ``--statistics``,
``--url``; ``--speed-only`` / ``--real-only``; ``--days`` and ``--records`` for the speed
part). All six shared days go into one res-8 dataset (America/Chicago, U = 30 m/s, a
``day`` budget window: the privacy unit is a bus-day) on a fresh Postgres schema. Each
configuration is released ``--releases`` times (a budget reset between) with ``min_users``
10 and ``max_user_cost`` 2 (per bus-day), 08:00 local:

* ``hour <day>``: the single hour of one weekday, adaptive res 8 to 5;
* ``<profile>``: 08:00 pooled over the profile's dates, fixed res 8, fixed res 7, adaptive
  res 8 to 5.

Scored by ``benchmarks/city_release.score`` against an independent reading of the CSVs
(each unit a (bus, date) pair): ``covered``, ``useful`` (records in cells whose ci95 is at
most 6 m/s wide and holds the truth), ``fine`` (covered records at res 7 or finer),
``holds``, the median |error|; and the release's own ``useful.records`` (from public
expected widths, equal to its preview's).

The speed part uploads ``--days`` days of ``--records`` readings in the 08:00 hour each
(``benchmarks/release.py``'s city, one day after another, through a live server's
ingestion; a day window; kept in ``--schema`` for reuse when given), then on a fresh
server (its own process, one worker) times the preview and the release of the 08:00
profile over them (``--parts``: fixed res 8, adaptive res 8 to 5) over HTTP, medians of
``--repeats``, and the server's peak RSS (its ``VmHWM``, reset before each request). A
budget reset before each request: every release creates its bus-days' accounts. Also
printed: the server's CPU seconds per request (all its threads; the rest of the wall time
is Postgres and, on a shared machine, waiting for a core). ``--profile DIR``: py-spy
samples the server during each request (raw collapsed stacks with native frames, one
file per request; py-spy on the PATH).
Targets at ``--days 20 --records 1000000`` (2·10⁷ records, 10⁶ bus-days): preview <= 5 s,
release <= 20 s, peak RSS <= 2 GiB.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import create_engine  # noqa: E402
from sqlalchemy.pool import NullPool  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from benchmarks.city_release import DATA, hour_rows, score  # noqa: E402
from benchmarks.ingest import COLUMNS  # noqa: E402
from benchmarks.postgres import PG_URL, fresh_database, schema_url  # noqa: E402
from benchmarks.release import city_csv  # noqa: E402
from tests.conftest import ADMIN_KEY  # noqa: E402
from tests.live_server import live_server  # noqa: E402

ADMIN = "dpg_profile_release_benchmark_admin"
DAYS = ("2015-03-18", "2015-03-19", "2016-11-24", "2016-11-25", "2016-11-26", "2016-11-27")
U, MIN_USERS, COST = 30.0, 10, 2.0
PROFILES = {
    "weekdays 2015-03-16..20": {"from": "2015-03-16", "to": "2015-03-20", "days": "weekdays"},
    "weekdays 2016-11-21..27": {"from": "2016-11-21", "to": "2016-11-27", "days": "weekdays"},
    "all 2016-11-24..27": {"from": "2016-11-24", "to": "2016-11-27", "days": "all"},
}
FIRST = date(2024, 3, 1)
SPEED_PARTITIONS = {"fixed": {}, "adaptive": {"partition": "adaptive", "coarsest_resolution": 5}}
PARTITIONS = {
    "fixed r8": {},
    "fixed r7": {"h3_resolution": 7},
    "adaptive": {"partition": "adaptive", "coarsest_resolution": 5},
}


@contextmanager
def served(url: str) -> Iterator[TestClient]:
    with tempfile.TemporaryDirectory() as tmp:
        db, drop = fresh_database("postgres", Path(tmp), url)
        try:
            upgrade(db)
            settings = Settings(database_url=db, admin_key=ADMIN, secret_key="bench-secret")
            with TestClient(create_app(settings)) as client:
                client.headers["Authorization"] = f"Bearer {ADMIN}"
                yield client
        finally:
            drop()


def _dataset(client: TestClient, name: str, timezone: str) -> int:
    resp = client.post(
        "/datasets",
        json={"name": name, "value_bound": U, "timezone": timezone, "budget_per_user": 1e6,
              "budget_window": "day", "max_epsilon_per_query": 10.0},
    )  # fmt: skip
    resp.raise_for_status()
    return int(resp.json()["id"])


def _units(day: str) -> list[tuple[str, str, float]]:
    """The 08:00 records of ``day`` with each bus as its bus-day unit."""
    return [(f"{bus}@{day}", cell, v) for bus, cell, v in hour_rows(day, 8)]


def _release(client: TestClient, ds: int, body: dict, rows: list, releases: int) -> str:
    figures, seconds, own = [], [], []
    for _ in range(releases):
        client.post(f"/datasets/{ds}/budget/reset", json={"reason": "bench"}).raise_for_status()
        start = time.perf_counter()
        resp = client.post(f"/datasets/{ds}/releases", json=body)
        seconds.append(time.perf_counter() - start)
        resp.raise_for_status()
        out = resp.json()
        figures.append(score(rows, out, "mean" if "mean" in body["statistics"] else "user_mean"))
        own.append(out["useful"]["records"])
    mean = {k: statistics.fmean(f[k] for f in figures) for k in figures[0]}
    return (
        f"cells {mean['grids']:5.1f}  covered {mean['covered']:.2f}  useful {mean['useful']:.2f}"
        f" (stated {statistics.fmean(own):.2f})  fine {mean['fine']:.2f}  holds "
        f"{mean['holds']:.2f}  |error| {mean['error']:.2f} m/s  {statistics.median(seconds):.2f} s"
    )


def load_days(client: TestClient) -> tuple[int, dict[str, list]]:
    """A day-windowed dataset holding the shared CapMetrics days, and each day's units."""
    ds = _dataset(client, "capmetrics days", "America/Chicago")
    for day in DAYS:
        client.post(
            f"/datasets/{ds}/records", content=(DATA / f"{day}.csv").read_bytes(),
            params=COLUMNS, headers={"Content-Type": "text/csv"},
        ).raise_for_status()  # fmt: skip
    return ds, {day: _units(day) for day in DAYS}


def real_days(client: TestClient, releases: int, stats: list[str]) -> None:
    ds, units = load_days(client)
    base = {"min_users": MIN_USERS, "max_user_cost": COST, "statistics": stats}
    for day in DAYS:
        if date.fromisoformat(day).isoweekday() > 5:
            continue
        body = {**base, "slot_start": f"{day}T08:00:00", **PARTITIONS["adaptive"]}
        print(f"hour {day} 08:00 adaptive   {_release(client, ds, body, units[day], releases)}")
    for name, profile in PROFILES.items():
        first, last = date.fromisoformat(profile["from"]), date.fromisoformat(profile["to"])
        rows = [
            r
            for day in DAYS
            if first <= date.fromisoformat(day) <= last
            and (profile["days"] == "all" or date.fromisoformat(day).isoweekday() <= 5)
            for r in units[day]
        ]
        for part, extra in PARTITIONS.items():
            body = {**base, "slot_start": "08:00", "profile": profile, **extra}
            print(f"{name:<24} {part:<9} {_release(client, ds, body, rows, releases)}", flush=True)


def _peak_rss_reset(pid: int) -> None:
    """Reset the kernel's peak RSS (VmHWM) of ``pid`` (Linux: ``clear_refs`` 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid``, all its threads (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    """The peak RSS (VmHWM) of ``pid`` since its start or the last reset, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _month(c: httpx.Client, n_days: int, records: int) -> int:
    """The synthetic month's dataset: found by name in the schema, else made and uploaded
    (through the real ingestion, one day after another)."""
    name = f"synthetic month {n_days} x {records}"
    for ds in c.get("/datasets").raise_for_status().json()["datasets"]:
        if ds["name"] != name:
            continue
        if c.get(f"/datasets/{ds['id']}").json().get("n_records") == n_days * records:
            print(f"{name}: reused (dataset {ds['id']})", flush=True)
            return int(ds["id"])
    resp = c.post(
        "/datasets",
        json={"name": name, "value_bound": U, "timezone": "UTC", "budget_per_user": 1e6,
              "budget_window": "day", "max_epsilon_per_query": 10.0},
    )  # fmt: skip
    resp.raise_for_status()
    ds = int(resp.json()["id"])
    started = time.perf_counter()
    hour = city_csv(records).decode()
    for d in range(n_days):
        day = (FIRST + timedelta(days=d)).isoformat()
        c.post(
            f"/datasets/{ds}/records", content=hour.replace("2024-03-05", day).encode(),
            headers={"Content-Type": "text/csv"},
        ).raise_for_status()  # fmt: skip
    print(f"{n_days} days x {records:,} records at 08:00 uploaded in "
          f"{time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip
    return ds


def speed(
    url: str, n_days: int, records: int, repeats: int, parts: list[str], profile: Path | None
) -> None:
    """Upload (or reuse) the month with one server, then time the profile on a fresh one
    (its own process, one worker) and read its peak RSS per case."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with tempfile.TemporaryDirectory() as tmp:
        for phase in ("upload", "time"):
            with (
                live_server(url, Path(tmp), workers=1, timeout=180) as server,
                httpx.Client(base_url=server.url, headers=headers, timeout=3600) as c,
            ):
                if phase == "upload":
                    ds = _month(c, n_days, records)
                else:
                    pid = server.process.pid
                    _time_profile(c, pid, ds, n_days, repeats, parts, profile)


@contextmanager
def _sampled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy samples ``pid`` (native frames, raw format) into ``out`` while the block runs."""
    if out is None:
        yield
        return
    spy = subprocess.Popen(
        ["py-spy", "record", "--pid", str(pid), "--native", "--format", "raw", "-o", str(out),
         "--rate", "50"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)  # attached before the request starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=120)


def _time_profile(
    c: httpx.Client,
    pid: int,
    ds: int,
    n_days: int,
    repeats: int,
    parts: list[str],
    spy: Path | None = None,
) -> None:
    last = (FIRST + timedelta(days=n_days - 1)).isoformat()
    profile = {"from": FIRST.isoformat(), "to": last, "days": "all"}
    print(f"server RSS at start {_peak_rss_mib(pid):.0f} MiB", flush=True)
    for part in parts:
        extra = SPEED_PARTITIONS[part]
        times: dict[str, list[float]] = {"preview": [], "release": []}
        cpu: dict[str, list[float]] = {"preview": [], "release": []}
        peak = 0.0
        for i in range(repeats):
            body: dict[str, Any] = {
                "slot_start": "08:00", "profile": profile, "min_users": MIN_USERS,
                "max_user_cost": COST + 0.001 * i, **extra,
            }  # fmt: skip
            for what, path in (("preview", "releases/preview"), ("release", "releases")):
                # a new epoch: the release creates its 10⁶ bus-days' accounts, as a first would
                c.post(f"/datasets/{ds}/budget/reset", json={"reason": "bench"}).raise_for_status()
                _peak_rss_reset(pid)
                out = None if spy is None else spy / f"{part}-{what}-{i}.txt"
                with _sampled(pid, out):
                    start, used = time.perf_counter(), _cpu_seconds(pid)
                    resp = c.post(f"/datasets/{ds}/{path}", json=body)
                    times[what].append(time.perf_counter() - start)
                    cpu[what].append(_cpu_seconds(pid) - used)
                if resp.status_code != 200:
                    raise RuntimeError(f"{path}: {resp.status_code} {resp.text[:300]}")
                peak = max(peak, _peak_rss_mib(pid))
        print(
            f"profile of {n_days} days, {part:<9} preview "
            f"{statistics.median(times['preview']):.2f} s  release "
            f"{statistics.median(times['release']):.2f} s  peak RSS {peak:.0f} MiB  server CPU "
            f"{statistics.median(cpu['preview']):.1f} s, {statistics.median(cpu['release']):.1f} s "
            f"(median of {repeats}: {', '.join(f'{t:.1f}' for t in times['release'])}; "
            f"{datetime.now():%H:%M})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", type=int, default=2)
    parser.add_argument("--statistics", nargs="+", default=["mean"])
    parser.add_argument("--days", type=int, default=20)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", nargs="+", default=list(SPEED_PARTITIONS),
                        choices=list(SPEED_PARTITIONS))  # fmt: skip
    parser.add_argument("--speed-only", action="store_true")
    parser.add_argument("--real-only", action="store_true")
    parser.add_argument("--url", default=PG_URL)
    parser.add_argument(
        "--schema", help="speed part: keep the month in this Postgres schema (made if missing, "
        "reused if it holds it already, never dropped)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", type=Path, help="speed part: py-spy the server during each request "
        "into this folder (raw collapsed stacks, native frames; py-spy on the PATH)",
    )  # fmt: skip
    args = parser.parse_args()
    if not args.speed_only:
        missing = [d for d in DAYS if not (DATA / f"{d}.csv").exists()]
        if missing:
            sys.exit(f"CapMetrics days {missing} not found in {DATA.resolve()}")
        with served(args.url) as client:
            real_days(client, args.releases, args.statistics)
    if args.real_only:
        return
    if args.schema:
        engine = create_engine(args.url, poolclass=NullPool)
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{args.schema}"')
        engine.dispose()
        speed(
            schema_url(args.url, args.schema), args.days, args.records, args.repeats,
            args.parts, args.profile,
        )  # fmt: skip
        return
    with tempfile.TemporaryDirectory() as tmp:
        url, drop = fresh_database("postgres", Path(tmp), args.url)
        try:
            speed(url, args.days, args.records, args.repeats, args.parts, args.profile)
        finally:
            drop()


if __name__ == "__main__":
    main()
