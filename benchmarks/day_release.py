"""A whole day of the synthetic city released in one call (issue 25: ``slots: 24``).

Run ``python benchmarks/day_release.py`` (options ``--records`` per hour, default 10^6;
``--repeats``; ``--url``). It uploads 24 hours of ``benchmarks/release.py``'s city (the
same buses every hour) through the HTTP API on a fresh Postgres schema, then times,
through HTTP, the release of the whole day (mean and variance, Clip-User, every grid,
each user charged in the ledger) at a per-grid ``epsilon`` and within a
``max_user_cost``, each a new release per run. Prints the medians. Target (issue 25):
<= 20 s on 2 cores at 10^6 records per hour.

``--schema NAME`` keeps the uploaded day in the Postgres schema ``NAME`` (created and
uploaded on a first run, reused by the next ones with the same ``--records``; drop it
with ``DROP SCHEMA NAME CASCADE``), so iterating on the release does not pay the upload.
``--only epsilon|max_user_cost`` times one of the two; ``--profile`` prints a cProfile
of each timed release (the server's work, in its thread), ``--profile-out PATH`` also
writes it to ``PATH.<case>.<run>`` for ``pstats``. After each, ``GET /releases/{id}`` of
the last release, the first page of the dataset's releases and the last release's request
again (served from its stored twin, as a publisher's rerun is) are timed too.
"""

from __future__ import annotations

import argparse
import pstats
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from benchmarks.postgres import PG_URL, cpu_seconds, fresh_database, schema_url  # noqa: E402
from benchmarks.release import ADMIN, city_csv, server_profiled  # noqa: E402

DAY = "2024-03-05"


def day_csv(records_per_hour: int) -> list[bytes]:
    """24 hourly uploads of the city (its 08:00 hour moved to each hour of the day)."""
    hour = city_csv(records_per_hour)
    return [hour.replace(b"T08:", f"T{h:02d}:".encode()) for h in range(24)]


def kept_database(schema: str, server: str) -> tuple[str, bool]:
    """The URL of Postgres schema ``schema`` (created if missing) and whether it was new."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    if not schema.replace("_", "").isalnum():
        raise SystemExit("--schema: letters, digits and _ only")
    admin = create_engine(server, poolclass=NullPool)
    with admin.begin() as conn:
        found = conn.execute(
            text("SELECT 1 FROM information_schema.schemata WHERE schema_name = :s"),
            {"s": schema},
        ).first()
        if found is None:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    admin.dispose()
    return schema_url(server, schema), found is None


def day_dataset(client: TestClient, records: int) -> int:
    """The id of the day's dataset (``day <records>``), uploaded here if it is not yet."""
    name = f"day {records}"
    for ds in client.get("/datasets").json()["datasets"]:
        if ds["name"] != name:
            continue
        detail = client.get(f"/datasets/{ds['id']}").json()
        if detail["n_records"] >= 0.9 * 24 * records:  # not a broken-off upload
            print(f"reusing dataset {ds['id']} ({name})", flush=True)
            return int(ds["id"])
    ds = client.post(
        "/datasets", json={"name": name, "value_bound": 30.0, "budget_per_user": 1e6}
    ).json()["id"]
    started = time.perf_counter()
    for body in day_csv(records):
        resp = client.post(
            f"/datasets/{ds}/records", content=body, headers={"Content-Type": "text/csv"}
        )
        resp.raise_for_status()
    print(
        f"uploaded 24 × {records:,} records in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return int(ds)


def run(url: str, args: argparse.Namespace) -> None:
    upgrade(url)
    settings = Settings(database_url=url, admin_key=ADMIN, secret_key="bench-secret")
    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN}"
        ds = day_dataset(client, args.records)
        base = {"slot_start": f"{DAY}T00:00:00+00:00", "slots": 24, "min_users": 1}
        stamp = time.time() % 1e4 * 1e-9 if args.schema else 0.0  # a new release per run
        cases = {
            "epsilon": lambda i: {"epsilon": 0.1 + i * 1e-6 + stamp},
            "max_user_cost": lambda i: {"max_user_cost": 4.0 + i * 1e-6 + stamp},
        }
        for name, extra in cases.items():
            if args.only and name != args.only:
                continue
            times = []
            for i in range(args.repeats):
                with server_profiled() if args.profile else nullcontext() as prof:
                    pg, t0, cpu = postgres_cpu(url), time.perf_counter(), time.process_time()
                    resp = client.post(f"/datasets/{ds}/releases", json={**base, **extra(i)})
                    answered = time.perf_counter() - t0
                    resp.raise_for_status()
                    out = orjson.loads(resp.content)  # as a client would (gc on)
                    times.append(time.perf_counter() - t0)
                    cpu, pg_cpu = time.process_time() - cpu, postgres_cpu(url, pg)
                print(
                    f"  day release ({name}) run {i + 1}: {times[-1]:.1f} s, answered in "
                    f"{answered:.1f} s, decoded in {times[-1] - answered:.1f} s "
                    f"({cpu:.1f} s CPU here, {pg_cpu:.1f} s in Postgres), "
                    f"{len(out['grids']):,} grids, K {out['K']}, epsilon {out['epsilon']}",
                    flush=True,
                )
                if prof is not None and args.profile_out:
                    prof.dump_stats(f"{args.profile_out}.{name}.{i + 1}")
                if prof is not None:
                    print(f"--- profile of run {i + 1} (the server's work, in its thread)")
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
                    pstats.Stats(prof).sort_stats("tottime").print_stats(30)
            print(f"day release ({name}): median {statistics.median(times):.1f} s", flush=True)
            timed_reads(client, ds, out["release_id"], {**base, **extra(args.repeats - 1)})


def postgres_cpu(url: str, since: dict[int, float] | None = None) -> Any:
    """The CPU seconds of the Postgres backends connected to this process (by their
    client ports; the server must run on this machine), per backend; with ``since``,
    their sum since then."""
    import psutil
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    mine = {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.raddr}
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT pid, client_port FROM pg_stat_activity")).all()
    engine.dispose()
    now = {}
    for pid, port in rows:
        if port in mine and (cpu := cpu_seconds(pid)) == cpu:  # NaN: the backend is gone
            now[pid] = cpu
    if since is None:
        return now
    return sum(cpu - since.get(pid, 0.0) for pid, cpu in now.items())


def timed_reads(client: TestClient, ds: int, release_id: str, body: dict[str, Any]) -> None:
    """GET the release just made, the first page of the dataset's releases, and the last
    POST again (served from its stored twin, charging nothing: a publisher's rerun): wall
    time and this process's CPU (client and server, which share it)."""
    for name, path in (
        ("GET /releases/{id}", f"/releases/{release_id}"),
        ("listing page", f"/datasets/{ds}/releases"),
        ("the same POST again", f"/datasets/{ds}/releases"),
    ):
        cpu, t0 = time.process_time(), time.perf_counter()
        try:
            resp = client.post(path, json=body) if name.endswith("again") else client.get(path)
            got = f"HTTP {resp.status_code}, {len(resp.content) / 1e6:.1f} MB"
        except Exception as exc:  # the server's error, raised by the test client
            got = f"failed: {str(exc).splitlines()[0][:120]}"
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
        print(f"  {name}: {wall:.1f} s, {cpu:.1f} s CPU, {got}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per hour")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--url", default=PG_URL)
    parser.add_argument("--schema", help="keep (and reuse) the uploaded day in this schema")
    parser.add_argument("--only", choices=("epsilon", "max_user_cost"))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-out", help="with --profile: also write each run's stats here")
    args = parser.parse_args()
    if args.schema:
        url, _ = kept_database(args.schema, args.url)
        run(url, args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        url, drop = fresh_database("postgres", Path(tmp), args.url)
        try:
            run(url, args)
        finally:
            drop()


if __name__ == "__main__":
    main()
