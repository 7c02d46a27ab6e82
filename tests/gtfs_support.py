"""GTFS-Realtime feeds built from CapMetrics rows, the same positions as CSV, and a local
HTTP server that serves feeds one after another (for the pull)."""

from __future__ import annotations

import csv
import http.server
import io
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
from fastapi import FastAPI
from google.transit import gtfs_realtime_pb2
from sqlalchemy import text

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "capmetrics"
#: The day held out from tuning (hours 0-9 only), used by the end-to-end feed tests.
HELD_OUT_DAY = "2017-03-16"
FEED_SECONDS = 30

Row = dict[str, str]


def capmetrics_rows(day: str) -> list[Row] | None:
    """The rows of a CapMetrics day, or None when the shared file is absent."""
    path = DATA / f"{day}.csv"
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def made_rows(n: int, seed: int = 0) -> list[Row]:
    """``n`` CapMetrics-like rows made here: 40 vehicles around Austin, a row every 5 s
    from 08:00 local (no vehicle reports twice in the same second)."""
    rng = np.random.default_rng(seed)
    start = datetime.fromisoformat("2016-11-26T08:00:00-06:00")
    return [
        {
            "vehicle_id": str(8900 + i % 40),
            "timestamp": (start + timedelta(seconds=5 * i)).isoformat(),
            "latitude": str(30.2 + rng.uniform(0, 0.2)),
            "longitude": str(-97.8 + rng.uniform(0, 0.2)),
            "speed": str(rng.uniform(0, 20)),
        }
        for i in range(n)
    ]


def epoch_seconds(row: Row) -> int:
    return int(datetime.fromisoformat(row["timestamp"]).timestamp())


def rows_between(rows: Sequence[Row], start: int, stop: int) -> list[Row]:
    """The rows with ``start <= epoch seconds < stop``."""
    return [r for r in rows if start <= epoch_seconds(r) < stop]


def feed_message(rows: Sequence[Row], header_ts: int | None = None) -> bytes:
    """One ``FeedMessage`` with an entity per row (the vehicle's own timestamp)."""
    msg = gtfs_realtime_pb2.FeedMessage()
    msg.header.gtfs_realtime_version = "2.0"
    if header_ts is not None:
        msg.header.timestamp = header_ts
    for i, r in enumerate(rows):
        e = msg.entity.add()
        e.id = str(i)
        e.vehicle.vehicle.id = r["vehicle_id"]
        e.vehicle.timestamp = epoch_seconds(r)
        e.vehicle.position.latitude = float(r["latitude"])
        e.vehicle.position.longitude = float(r["longitude"])
        e.vehicle.position.speed = float(r["speed"])
    return msg.SerializeToString()


def windows(rows: Sequence[Row], seconds: int = FEED_SECONDS) -> list[list[Row]]:
    """The rows cut into consecutive ``seconds`` windows of their times (empty ones left
    out), in time order: what an agency's feed holds at each publication."""
    by_window: dict[int, list[Row]] = {}
    for r in rows:
        by_window.setdefault(epoch_seconds(r) // seconds, []).append(r)
    return [by_window[w] for w in sorted(by_window)]


def feeds(rows: Sequence[Row], seconds: int = FEED_SECONDS) -> list[bytes]:
    """One ``FeedMessage`` per ``seconds`` of the rows' times (header time: the window's end)."""
    return [
        feed_message(w, header_ts=(epoch_seconds(w[0]) // seconds + 1) * seconds)
        for w in windows(rows, seconds)
    ]


def _float32(text: str) -> str:
    return repr(float(np.float32(float(text))))


def positions_csv(rows: Sequence[Row]) -> bytes:
    """The same positions as CSV (``user_id,timestamp,lat,lon,value``): coordinates and
    speeds rounded to 32-bit floats, as the protocol carries them."""
    out = io.StringIO()
    out.write("user_id,timestamp,lat,lon,value\n")
    for r in rows:
        out.write(
            f"{r['vehicle_id']},{r['timestamp']},{_float32(r['latitude'])},"
            f"{_float32(r['longitude'])},{_float32(r['speed'])}\n"
        )
    return out.getvalue().encode()


class FeedServer:
    """Serves ``GET /feed`` from ``next_body()`` (a ``bytes`` body, or an ``int`` status
    to answer with) on a local port, one request at a time, in a thread."""

    def __init__(self, next_body: Callable[[], bytes | int]) -> None:
        self.next_body = next_body
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests += 1
                body = server.next_body()
                if isinstance(body, int):
                    self.send_error(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/feed"

    @contextmanager
    def running(self) -> Iterator[FeedServer]:
        # shutdown() waits for the next poll: 0.01 s, not the default 0.5 s
        thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
            thread.join()


def sequence(bodies: Sequence[bytes | int]) -> Callable[[], bytes | int]:
    """``next_body`` serving ``bodies`` in order, then the last one again and again."""
    it = iter(bodies)
    last: list[bytes | int] = [404]

    def next_body() -> bytes | int:
        last[0] = next(it, last[0])
        return last[0]

    return next_body


def held_out_rows(hours: tuple[float, float] | None = None) -> list[Row]:
    """The held-out CapMetrics day's rows (local hours ``[start, stop)``, or all of them);
    the test is skipped, saying why, when the shared file is absent."""
    import pytest

    rows = capmetrics_rows(HELD_OUT_DAY)
    if rows is None:
        pytest.skip(f"CapMetrics day {HELD_OUT_DAY} not found in {DATA} (../shared/data)")
    if hours is None:
        return rows
    midnight = datetime.fromisoformat(HELD_OUT_DAY).replace(tzinfo=ZoneInfo("America/Chicago"))
    start, stop = (int(midnight.timestamp() + h * 3600) for h in hours)
    return rows_between(rows, start, stop)


def sliding(rows: Sequence[Row], seconds: int = FEED_SECONDS) -> list[bytes]:
    """What a feed polled every ``seconds`` serves when each publication also repeats the
    previous window (vehicles that did not report again): windows ``k-1`` and ``k``."""
    parts = windows(rows, seconds)
    return [feed_message([*(parts[k - 1] if k else []), *parts[k]]) for k in range(len(parts))]


def contents(app: FastAPI, dataset_id: int) -> tuple[list[tuple], list[tuple]]:
    """A dataset's grids ``(h3_cell, slot_start, n_users, n_records)`` and records
    ``(h3_cell, slot_start, user hash, ts, value)``, sorted."""
    with app.state.sessionmaker() as s:
        grids = s.execute(
            text("SELECT h3_cell, slot_start, n_users, n_records FROM grids "
                 "WHERE dataset_id = :d ORDER BY 1, 2"), {"d": dataset_id},
        ).all()  # fmt: skip
        records = s.execute(
            text("SELECT g.h3_cell, g.slot_start, u.user_hash, r.ts, r.value FROM records r "
                 "JOIN grids g ON g.id = r.grid_id JOIN dataset_users u ON u.id = r.user_id "
                 "WHERE r.dataset_id = :d ORDER BY 1, 2, 3, 4"), {"d": dataset_id},
        ).all()  # fmt: skip
    return [tuple(g) for g in grids], [tuple(r) for r in records]
