"""What the CSV ingestion tests share: the CapMetrics columns, table counts, paging."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import h3
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.datasets.models import DatasetUser, Grid, GridSnapshot, Record, Upload
from app.uploads.repository import IngestRepository
from tests.helpers import make_csv

CAPMETRICS_DAYS = Path(__file__).resolve().parents[2] / "../shared/data/capmetrics"
CAPMETRICS = CAPMETRICS_DAYS / "2016-11-25.csv"
CAPMETRICS_COLUMNS = {
    "user_col": "vehicle_id",
    "time_col": "timestamp",
    "lat_col": "latitude",
    "lon_col": "longitude",
    "value_col": "speed",
}


def capmetrics_hour(
    day: str, hour: int, zone: ZoneInfo, bound: float
) -> list[tuple[str, datetime, str, float]]:
    """(bus, local time, res-8 cell, speed) of a CapMetrics day's records in local ``hour``:
    the first record per (bus, timestamp), speeds clamped to [0, ``bound``]."""
    seen: set[tuple[str, datetime]] = set()
    out = []
    with (CAPMETRICS_DAYS / f"{day}.csv").open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            ts = datetime.fromisoformat(row["timestamp"])
            if (row["vehicle_id"], ts) in seen:
                continue
            seen.add((row["vehicle_id"], ts))
            local = ts.astimezone(zone)
            if local.hour != hour:
                continue
            cell = h3.latlng_to_cell(float(row["latitude"]), float(row["longitude"]), 8)
            speed = min(max(float(row["speed"]), 0.0), bound)
            out.append((row["vehicle_id"], local, cell, speed))
    return out


def _error(resp, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == code


def counts(app: FastAPI) -> dict[str, int]:
    """Rows per ingestion table (to check that nothing was written)."""
    with app.state.sessionmaker() as session:
        return {
            m.__tablename__: session.scalar(select(func.count()).select_from(m))
            for m in (Record, Grid, GridSnapshot, DatasetUser, Upload)
        }


NOTHING = {"records": 0, "grids": 0, "grid_snapshots": 0, "dataset_users": 0, "uploads": 0}


def all_grids(client: TestClient, dataset_id: int) -> list[dict]:
    out: list[dict] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(
            f"/datasets/{dataset_id}/grids", params={"limit": 10000, "offset": offset}
        ).json()
        out += page["grids"]
        offset = page["next"]
    return out


def rows_csv(n: int, user: str = "u", start_min: int = 0) -> str:
    return make_csv(
        (
            f"{user}{i % 3}",
            f"2016-11-25T10:{(start_min + i) % 60:02d}:{i // 60:02d}Z",
            12.97,
            77.59,
            i % 60,
        )
        for i in range(n)
    )


@dataclass
class InsertWatch:
    """The record inserts of uploads (``calls``: one entry each); from the insert numbered
    ``fail_from`` on (1-based), each raises, as a full disk would."""

    fail_from: int | None = None
    calls: list[int] = field(default_factory=list)


def watch_inserts(monkeypatch: pytest.MonkeyPatch, fail_from: int | None = None) -> InsertWatch:
    watch = InsertWatch(fail_from)
    real = IngestRepository.insert_records

    def watched(self, *args, **kwargs):
        watch.calls.append(1)
        if watch.fail_from is not None and len(watch.calls) >= watch.fail_from:
            raise RuntimeError("disk on fire")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(IngestRepository, "insert_records", watched)
    return watch
