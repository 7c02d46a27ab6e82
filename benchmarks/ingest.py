"""Ingestion throughput and peak memory, on SQLite and Postgres.

Generates a synthetic CSV (about 2,000 buses over a city-sized box, one day of
timestamps with a UTC offset, 40% zero speeds), then uploads it through the
service layer (``app.datasets.upload.upload_records``, the function the HTTP
endpoint runs, fed 64 KiB chunks) into a fresh database each run, and reports
the median rows per second of ``--runs`` runs (parse, write, snapshot rebuild
and commit included). ``--http`` adds one run through the HTTP endpoint with the
app in-process (a streamed request body). Peak memory (``ru_maxrss``) is
measured in a fresh child process per file size, to show it does not grow with
the file.

    python benchmarks/ingest.py                       # 1e6 rows, both databases, 3 runs
    python benchmarks/ingest.py --memory 1000000 5000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CHUNK = 64 * 1024
SECRET = b"benchmark-secret"


def generate_csv(path: Path, rows: int, users: int = 2000, seed: int = 7) -> None:
    """``rows`` records, ``users`` vehicles doing random walks in a 40 km box (Austin)."""
    rng = np.random.default_rng(seed)
    lat0, lon0, span = 30.10, -97.95, 0.40
    start = datetime(2016, 11, 25, 0, 0, tzinfo=UTC) + timedelta(hours=6)  # local midnight
    per_user = rows // users
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write("vehicle_id,timestamp,speed,route_id,latitude,longitude\n")
        written = 0
        for u in range(users):
            n = per_user + (1 if u < rows - per_user * users else 0)
            secs = np.sort(rng.integers(0, 86_400, n))
            lat = np.clip(
                lat0 + span * rng.random() + np.cumsum(rng.normal(0, 4e-4, n)), 30.0, 30.6
            )
            lon = np.clip(
                lon0 + span * rng.random() + np.cumsum(rng.normal(0, 4e-4, n)), -98.1, -97.4
            )
            speed = np.where(rng.random(n) < 0.4, 0.0, rng.uniform(0, 30, n))
            lines = []
            for s, la, lo, v in zip(
                secs.tolist(), lat.tolist(), lon.tolist(), speed.tolist(), strict=True
            ):
                t = start + timedelta(seconds=s) - timedelta(hours=6)
                lines.append(
                    f"{8000 + u},{t:%Y-%m-%dT%H:%M:%S}-06:00,{v:.5f},{u % 80},{la:.6f},{lo:.6f}\n"
                )
            f.write("".join(lines))
            written += n
    assert written == rows


def file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def _fresh_database(kind: str, tmp: Path) -> tuple[str, callable]:
    if kind == "sqlite":
        db = tmp / f"bench-{uuid.uuid4().hex[:8]}.db"
        return f"sqlite:///{db}", lambda: [p.unlink() for p in tmp.glob(db.name + "*")]
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    schema = "bench_" + uuid.uuid4().hex[:12]
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    url = make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})

    def drop() -> None:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()

    return url.render_as_string(hide_password=False), drop


def _create_dataset(sessionmaker) -> int:
    from app.datasets.schemas import DatasetCreate
    from app.datasets.service import create_dataset

    with sessionmaker.begin() as session:
        return create_dataset(
            session,
            DatasetCreate(
                name="bench",
                value_bound=30.0,
                h3_resolution=8,
                timeslot_minutes=60,
                timezone="America/Chicago",
                budget_per_user=10.0,
            ),
        ).id


def _options():
    from app.datasets.upload import UploadOptions
    from app.ingest.csv_records import ColumnMap

    return UploadOptions(
        columns=ColumnMap("vehicle_id", "timestamp", "latitude", "longitude", "speed")
    )


def run_service(kind: str, csv_path: Path, tmp: Path) -> tuple[float, dict]:
    """One upload through the service layer into a fresh database; (seconds, answer)."""
    from app.datasets.upload import upload_records
    from app.db.engine import make_engine, make_sessionmaker
    from app.db.migrate import upgrade

    url, drop = _fresh_database(kind, tmp)
    try:
        upgrade(url)
        engine = make_engine(url)
        sessionmaker = make_sessionmaker(engine)
        dataset_id = _create_dataset(sessionmaker)
        t0 = time.perf_counter()
        with sessionmaker.begin() as session:
            answer, _ = upload_records(
                session, dataset_id, file_chunks(csv_path), _options(), hash_secret=SECRET
            )
        elapsed = time.perf_counter() - t0
        engine.dispose()
        return elapsed, answer
    finally:
        drop()


def run_http(kind: str, csv_path: Path, tmp: Path) -> tuple[float, dict]:
    """One upload through ``POST /datasets/{id}/records`` (app in-process, streamed body)."""
    import anyio
    import httpx

    from app.config import Settings
    from app.db.migrate import upgrade
    from app.main import create_app

    url, drop = _fresh_database(kind, tmp)
    admin = "dpg_bench_admin_key_0123456789"
    try:
        upgrade(url)
        app = create_app(
            Settings(database_url=url, admin_key=admin, secret_key="bench", secret_file=tmp / "s")
        )

        async def body() -> Iterator[bytes]:
            for chunk in file_chunks(csv_path):
                yield chunk

        async def main() -> tuple[float, dict]:
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(
                    transport=transport,
                    base_url="http://bench",
                    headers={"Authorization": f"Bearer {admin}"},
                    timeout=None,
                ) as client:
                    made = await client.post(
                        "/datasets",
                        json={
                            "name": "bench",
                            "value_bound": 30,
                            "timezone": "America/Chicago",
                            "budget_per_user": 10,
                        },
                    )
                    dataset_id = made.json()["id"]
                    t0 = time.perf_counter()
                    resp = await client.post(
                        f"/datasets/{dataset_id}/records",
                        params={
                            "user_col": "vehicle_id",
                            "time_col": "timestamp",
                            "lat_col": "latitude",
                            "lon_col": "longitude",
                            "value_col": "speed",
                        },
                        content=body(),
                        headers={"content-type": "text/csv"},
                    )
                    elapsed = time.perf_counter() - t0
                    assert resp.status_code == 200, resp.text
                    return elapsed, resp.json()

        result = anyio.run(main)
        app.state.engine.dispose()
        return result
    finally:
        drop()


def peak_memory_child(kind: str, csv_path: Path, tmp: Path) -> dict:
    """Run one service upload in a fresh interpreter; its peak RSS (MiB) and time."""
    code = (
        "import json, resource, sys; sys.path.insert(0, %r); "
        "from benchmarks.ingest import run_service; from pathlib import Path; "
        "import app.main; base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
        "t, a = run_service(%r, Path(%r), Path(%r)); "
        "print(json.dumps({'seconds': t, 'rows': a['rows'], 'base_mib': base / 1024, "
        "'peak_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))"
    ) % (str(ROOT), kind, str(csv_path), str(tmp))
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    global PG_URL
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--pg-url", default=os.environ.get("DPGATE_BENCH_POSTGRES_URL", PG_URL))
    parser.add_argument("--http", action="store_true", help="also one run through HTTP")
    parser.add_argument(
        "--memory",
        type=int,
        nargs="*",
        default=[],
        metavar="ROWS",
        help="file sizes (rows) for the peak-memory runs, e.g. 1000000 5000000",
    )
    args = parser.parse_args(argv)
    PG_URL = args.pg_url
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]

    with tempfile.TemporaryDirectory(prefix="dpgate-bench-") as d:
        tmp = Path(d)
        csv_path = tmp / "records.csv"
        t0 = time.perf_counter()
        generate_csv(csv_path, args.rows)
        size = csv_path.stat().st_size
        print(
            f"generated {args.rows:,} rows ({size / 2**20:.1f} MiB) in {time.perf_counter() - t0:.1f}s"
        )
        for kind in kinds:
            times = []
            for i in range(args.runs):
                elapsed, answer = run_service(kind, csv_path, tmp)
                times.append(elapsed)
                print(
                    f"  {kind:8s} run {i + 1}: {elapsed:6.2f}s  {args.rows / elapsed:10,.0f} rows/s  "
                    f"(accepted {answer['accepted']:,}, duplicates {answer['duplicates']:,}, "
                    f"grids {answer['grids_updated']:,})"
                )
            med = statistics.median(times)
            print(
                f"{kind}: median {med:.2f}s = {args.rows / med:,.0f} rows/s over {args.runs} runs"
            )
            if args.http:
                elapsed, _ = run_http(kind, csv_path, tmp)
                print(f"{kind}: through HTTP (in-process): {args.rows / elapsed:,.0f} rows/s")
        for rows in args.memory:
            path = tmp / f"mem-{rows}.csv"
            generate_csv(path, rows)
            size = path.stat().st_size
            for kind in kinds:
                m = peak_memory_child(kind, path, tmp)
                print(
                    f"memory {kind:8s} {rows:>10,} rows ({size / 2**20:7.1f} MiB): "
                    f"peak RSS {m['peak_mib']:.0f} MiB (after imports {m['base_mib']:.0f} MiB), "
                    f"{rows / m['seconds']:,.0f} rows/s"
                )
            path.unlink()
    print(
        f"this process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
