"""Ingestion throughput and peak memory (Postgres: a fresh schema per run).

Generates a synthetic CSV (2,000 buses doing random walks in a 40 km box around
Austin, one day of timestamps with a UTC offset, 40% zero speeds), uploads it
through the service layer (``app.uploads.service.upload_records``, the function
the HTTP endpoint runs, fed 64 KiB chunks) into a fresh database per run, and
reports the median rows per second of ``--runs`` runs (parsing, writing, grid
snapshots and commit included). ``--http`` adds one run through
``POST /datasets/{id}/records`` with the app in-process and a streamed body.
``--memory N ...`` measures the peak RSS of a fresh interpreter uploading an
N-row file (about a million rows per day, so grids grow with it), to show that
memory does not grow with the file. ``--format gtfs-rt`` uploads the same rows as one
GTFS-Realtime ``FeedMessage`` (an entity per row: the vehicle, its timestamp, position
and speed), the body of ``POST /datasets/{id}/records`` with
``Content-Type: application/x-protobuf``; ``--format both`` alternates the two.
``--floor`` alternates each run with a ``COPY`` of the same CSV into an unindexed table
and prints the ratio of the medians (the floor's time over the upload's).

    python benchmarks/ingest.py                              # 1e6 rows
    python benchmarks/ingest.py --format both --runs 5
    DPGATE_BENCH_CODE=/tmp/base python benchmarks/ingest.py --runs 5   # the code before

Each run also reports the CPU seconds of the uploading process (its parsing process
included, for a large upload) and of its Postgres backend (from ``/proc``, when the
server is local): on a machine shared with other work, wall time moves with the load
and these barely do.
    python benchmarks/ingest.py --runs 0 --memory 1000000 5000000
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: ``DPGATE_BENCH_CODE``: measure the ``app`` package of another checkout with this same
#: harness (an A/B against the code before: ``git worktree add /tmp/base main``).
CODE = os.environ.get("DPGATE_BENCH_CODE", str(ROOT))
sys.path.insert(0, CODE)
sys.path.insert(1, str(ROOT))
os.chdir(CODE)  # the parsing fork server imports app from its start directory (3.11)

from benchmarks import postgres  # noqa: E402

CHUNK = 64 * 1024
#: The CSV's columns, for ``--floor``'s table.
FLOOR = (
    "vehicle_id text, ts timestamptz, speed float8, route_id int, latitude float8, longitude float8"
)
SECRET = b"benchmark-secret"
COLUMNS = {
    "user_col": "vehicle_id",
    "time_col": "timestamp",
    "lat_col": "latitude",
    "lon_col": "longitude",
    "value_col": "speed",
}


def generate_csv(path: Path, rows: int, users: int = 2000, days: int = 1, seed: int = 7) -> None:
    """``rows`` records of ``users`` vehicles, each a random walk over ``days`` local days."""
    rng = np.random.default_rng(seed)
    midnight = datetime(2016, 11, 25, 6, 0, tzinfo=UTC)  # 00:00 in Austin (UTC-6)
    per_user = rows // users
    written = 0
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write("vehicle_id,timestamp,speed,route_id,latitude,longitude\n")
        for u in range(users):
            n = per_user + (1 if u < rows - per_user * users else 0)
            secs = np.sort(rng.integers(0, 86_400 * days, n)).tolist()
            lat = 30.10 + 0.4 * rng.random() + np.cumsum(rng.normal(0, 4e-4, n))
            lon = -97.95 + 0.4 * rng.random() + np.cumsum(rng.normal(0, 4e-4, n))
            speed = np.where(rng.random(n) < 0.4, 0.0, rng.uniform(0, 30, n)).tolist()
            lines = [
                f"{8000 + u},{midnight + timedelta(seconds=s - 21600):%Y-%m-%dT%H:%M:%S}-06:00,"
                f"{v:.5f},{u % 80},{la:.6f},{lo:.6f}\n"
                for s, v, la, lo in zip(secs, speed, lat.tolist(), lon.tolist(), strict=True)
            ]
            f.write("".join(lines))
            written += n
    assert written == rows


def generate_feed(csv_path: Path, feed_path: Path) -> None:
    """The rows of ``csv_path`` as one GTFS-Realtime ``FeedMessage`` in ``feed_path``."""
    import csv

    from google.transit import gtfs_realtime_pb2

    msg = gtfs_realtime_pb2.FeedMessage()
    msg.header.gtfs_realtime_version = "2.0"
    with csv_path.open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            v = msg.entity.add(id=str(i)).vehicle
            v.vehicle.id = row["vehicle_id"]
            v.timestamp = int(datetime.fromisoformat(row["timestamp"]).timestamp())
            v.position.latitude = float(row["latitude"])
            v.position.longitude = float(row["longitude"])
            v.position.speed = float(row["speed"])
    msg.header.timestamp = int(time.time())
    feed_path.write_bytes(msg.SerializeToString())


def file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def _options(fmt: str = "csv") -> Any:
    from app.ingest.csv_records import ColumnMap
    from app.uploads.service import UploadOptions

    if fmt == "gtfs-rt":
        return UploadOptions(format="gtfs-rt")
    return UploadOptions(
        columns=ColumnMap(*(COLUMNS[k] for k in ("user_col", "time_col", "lat_col", "lon_col")),
                          COLUMNS["value_col"])
    )  # fmt: skip


def run_service(kind: str, csv_path: Path, tmp: Path, fmt: str = "csv") -> tuple[float, dict]:
    """One upload through the service layer into a fresh database: (seconds, answer)."""
    from app.datasets.schemas import DatasetCreate
    from app.datasets.service import create_dataset
    from app.db.engine import make_engine, make_sessionmaker
    from app.db.migrate import upgrade
    from app.uploads.service import upload_records

    url, drop = postgres.fresh_database(kind, tmp)
    try:
        upgrade(url)
        engine = make_engine(url)
        sessionmaker = make_sessionmaker(engine)
        with sessionmaker.begin() as session:
            spec = DatasetCreate(
                name="bench", value_bound=30, timezone="America/Chicago", budget_per_user=10
            )
            dataset_id = create_dataset(session, spec).id
        t0 = time.perf_counter()
        client0 = time.process_time()
        parser0 = _parser_cpu_seconds()
        with sessionmaker.begin() as session:
            backend = session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar()
            server0 = postgres.cpu_seconds(backend)
            answer, _ = upload_records(
                session,
                dataset_id,
                file_chunks(csv_path),
                _options(fmt),
                hash_secret=SECRET,
                **_declared_size(upload_records, csv_path),
            )
        elapsed = time.perf_counter() - t0
        answer["client_cpu_s"] = time.process_time() - client0 + _parser_cpu_seconds() - parser0
        answer["server_cpu_s"] = postgres.cpu_seconds(backend) - server0  # committed: backend idle
        engine.dispose()
        return elapsed, answer
    finally:
        drop()


def _declared_size(upload_records: Callable, path: Path) -> dict[str, int]:
    """The body's size, as the endpoint passes its Content-Length (for code that takes it)."""
    known = "body_size" in inspect.signature(upload_records).parameters
    return {"body_size": path.stat().st_size} if known else {}


def _parser_cpu_seconds() -> float:
    """CPU seconds of the parsing processes of large uploads so far (the fork server
    reaps them, so they are its children's time), 0 if none was started."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def run_http(kind: str, csv_path: Path, tmp: Path) -> tuple[float, dict]:
    """One upload through ``POST /datasets/{id}/records`` (app in-process, streamed body)."""
    import anyio
    import httpx

    from app.config import Settings
    from app.db.migrate import upgrade
    from app.main import create_app

    url, drop = postgres.fresh_database(kind, tmp)
    admin = "dpg_bench_admin_key_0123456789"
    try:
        upgrade(url)
        settings = Settings(
            database_url=url, admin_key=admin, secret_key="bench", secret_file=tmp / "secret"
        )
        app = create_app(settings)

        async def body() -> AsyncIterator[bytes]:
            for chunk in file_chunks(csv_path):
                yield chunk

        async def go() -> tuple[float, dict]:
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app),
                    base_url="http://bench",
                    headers={"Authorization": f"Bearer {admin}"},
                    timeout=None,
                ) as client,
            ):
                made = await client.post(
                    "/datasets",
                    json={"name": "bench", "value_bound": 30,
                          "timezone": "America/Chicago", "budget_per_user": 10},
                )  # fmt: skip
                t0 = time.perf_counter()
                resp = await client.post(
                    f"/datasets/{made.json()['id']}/records",
                    params=COLUMNS,
                    content=body(),
                    headers={"content-type": "text/csv"},
                )
                elapsed = time.perf_counter() - t0
                assert resp.status_code == 200, resp.text
                return elapsed, resp.json()

        return anyio.run(go)
    finally:
        drop()


def peak_memory_child(kind: str, csv_path: Path, tmp: Path) -> dict:
    """One service upload in a fresh interpreter: its peak RSS (MiB) and time."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(csv_path), str(tmp)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _peak_rss_mib() -> float:
    """Peak resident memory of this process image (``VmHWM``), in MiB.

    ``getrusage(RUSAGE_SELF).ru_maxrss`` is used where ``/proc`` is missing, but on
    Linux it also counts the parent's peak at fork time, which would hide ours.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(kind: str, csv_path: str, tmp: str) -> int:
    import app.main  # noqa: F401 - the imports count in the baseline

    base = _peak_rss_mib()
    seconds, answer = run_service(kind, Path(csv_path), Path(tmp))
    result = {"seconds": seconds, "rows": answer["rows"], "base_mib": base}
    print(json.dumps({**result, "peak_mib": _peak_rss_mib()}))
    return 0


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(*argv[1:4])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3, help="0 skips the throughput runs")
    parser.add_argument("--pg-url", default=postgres.PG_URL)
    parser.add_argument("--http", action="store_true", help="also one run through HTTP")
    parser.add_argument(
        "--floor", action="store_true", help="also COPY the CSV into an unindexed table, alternated"
    )
    parser.add_argument("--memory", type=int, nargs="*", default=[], metavar="ROWS")
    parser.add_argument(
        "--format",
        choices=("csv", "gtfs-rt", "both"),
        default="csv",
        help="the body uploaded: CSV, one GTFS-Realtime FeedMessage, or both alternated",
    )
    args = parser.parse_args(argv)
    postgres.PG_URL = args.pg_url  # fresh_database's server
    kinds = ["postgres"]
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

    with tempfile.TemporaryDirectory(prefix="dpgate-bench-") as d:
        tmp = Path(d)
        formats = ["csv", "gtfs-rt"] if args.format == "both" else [args.format]
        bodies: dict[str, Path] = {}
        if args.runs:
            csv_path = bodies["csv"] = tmp / "records.csv"
            t0 = time.perf_counter()
            generate_csv(csv_path, args.rows)
            took = time.perf_counter() - t0
            print(f"generated {args.rows:,} rows ({_mib(csv_path.stat().st_size)}) in {took:.1f}s")
            if "gtfs-rt" in formats:
                bodies["gtfs-rt"] = tmp / "feed.pb"
                generate_feed(csv_path, bodies["gtfs-rt"])
                size = _mib(bodies["gtfs-rt"].stat().st_size)
                print(f"the same rows as one GTFS-Realtime FeedMessage: {size}")
        for kind in kinds if args.runs else []:
            times: dict[str, list[float]] = {fmt: [] for fmt in formats}
            cpus: dict[str, list[tuple[float, float]]] = {fmt: [] for fmt in formats}
            floors: list[float] = []
            for i in range(args.runs):
                if args.floor:
                    floors.append(postgres.copy_floor(file_chunks(bodies["csv"]), FLOOR, tmp))
                    print(f"  COPY floor run {i + 1}: {args.rows / floors[-1]:10,.0f} rows/s")
                for fmt in formats:  # alternated, so both see the same machine load
                    elapsed, answer = run_service(kind, bodies[fmt], tmp, fmt)
                    times[fmt].append(elapsed)
                    cpu = (answer["client_cpu_s"], answer["server_cpu_s"])
                    cpus[fmt].append(cpu)
                    print(
                        f"  {kind} {fmt:7s} run {i + 1}: {elapsed:6.2f}s "
                        f"{args.rows / elapsed:10,.0f} rows/s (accepted {answer['accepted']:,}, "
                        f"duplicates {answer['duplicates']:,}, grids {answer['grids_updated']:,}); "
                        f"CPU: dpgate {cpu[0]:.2f}s, its Postgres backend {cpu[1]:.2f}s"
                    )
            for fmt, ts in times.items():
                med = statistics.median(ts)
                client = statistics.median(c for c, _ in cpus[fmt])
                server = statistics.median(s for _, s in cpus[fmt])
                print(
                    f"{kind} {fmt}: median {med:.2f}s = {args.rows / med:,.0f} rows/s "
                    f"({args.runs} runs; min {min(ts):.2f}s, max {max(ts):.2f}s); median CPU "
                    f"dpgate {client:.2f}s ({args.rows / client:,.0f} rows per CPU-second), "
                    f"Postgres {server:.2f}s ({args.rows / server:,.0f} rows per CPU-second)"
                )
            if floors:
                ratio = statistics.median(floors) / statistics.median(times[formats[0]])
                print(f"{formats[0]} vs COPY into an unindexed table: {ratio:.2f}x")
            if args.http:
                elapsed, _ = run_http(kind, csv_path, tmp)
                print(f"{kind}: through HTTP in-process: {args.rows / elapsed:,.0f} rows/s")
        for rows in args.memory:
            path = tmp / f"mem-{rows}.csv"
            days = max(1, rows // 1_000_000)  # about a million rows a day: grids grow too
            generate_csv(path, rows, days=days)
            for kind in kinds:
                m = peak_memory_child(kind, path, tmp)
                size = _mib(path.stat().st_size)
                print(
                    f"memory {kind:8s} {rows:>10,} rows, {days} day(s) ({size}): "
                    f"peak RSS {m['peak_mib']:.0f} MiB (after imports {m['base_mib']:.0f} MiB), "
                    f"{rows / m['seconds']:,.0f} rows/s"
                )
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
