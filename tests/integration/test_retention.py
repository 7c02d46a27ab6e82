"""Raw retention (``app.uploads.retention``): a dataset's raw months older than its
``raw_retention_days`` are dropped whole once their grids' snapshots are stored; grids,
queries, releases and coarser grids keep working from the snapshots; an upload into a
dropped month is refused with 409 and changes nothing."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import h3
import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.helpers import create_dataset, make_csv, upload_csv

CELLS = sorted(h3.cell_to_children(h3.latlng_to_cell(30.2672, -97.7431, 7), 8))[:3]
OLD = datetime(2024, 3, 5, 10, 0, tzinfo=UTC)


def _rows(start: datetime, hours: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    rows = []
    for h in range(hours):
        for u in range(15):
            for k in range(int(rng.integers(1, 4))):
                lat, lon = h3.cell_to_latlng(CELLS[int(rng.integers(0, len(CELLS)))])
                ts = start + timedelta(hours=h, minutes=7 * k, seconds=u)
                rows.append(
                    (f"u{u}", ts.isoformat(), lat, lon, round(float(rng.uniform(0, 30)), 2))
                )
    return rows


def _raw_count(engine, ds: int) -> int:
    with engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM records WHERE dataset_id = {ds}")).scalar()


def test_old_months_are_dropped_and_their_grids_keep_working(client: TestClient, app) -> None:
    engine = app.state.sessionmaker.kw["bind"]
    ds = create_dataset(client, value_bound=30.0, raw_retention_days=30)["id"]
    rows = _rows(OLD, 3, 1)
    up = upload_csv(client, ds, make_csv(rows))
    assert up["accepted"] == len(rows)
    detail = client.get(f"/datasets/{ds}").json()
    assert detail["raw_retention_days"] == 30
    kept_from = datetime.fromisoformat(detail["raw_kept_from"])
    assert kept_from == datetime(2024, 5, 1, tzinfo=UTC)  # March and the month made ahead
    assert _raw_count(engine, ds) == 0
    assert detail["n_records"] == len(rows)  # the grids keep their counts

    grids = client.get(f"/datasets/{ds}/grids").json()["grids"]
    assert sum(g["n_records"] for g in grids) == len(rows)
    mean = client.get(f"/grids/{grids[0]['grid_id']}/mean", params={"epsilon": 0.5})
    assert mean.status_code == 200, mean.text
    release = client.post(
        f"/datasets/{ds}/releases",
        json={"slot_start": OLD.isoformat(), "slots": 3, "epsilon": 0.2, "min_users": 1},
    )
    assert release.status_code == 200, release.text

    # a coarser level made after the drop, from the snapshots: occupancy as the raw rows'
    coarse = client.get(
        f"/datasets/{ds}/grids", params={"h3_resolution": 7, "slot_minutes": 1440}
    ).json()["grids"]
    want: dict[str, int] = defaultdict(int)
    for user, *_ in rows:
        want[user] += 1
    assert len(coarse) == 1 and coarse[0]["n_records"] == len(rows)
    assert coarse[0]["n_users"] == len(want)
    assert coarse[0]["max_user_records"] == max(want.values())
    coarse_mean = client.get(f"/grids/{coarse[0]['grid_id']}/mean", params={"epsilon": 0.5})
    assert coarse_mean.status_code == 200, coarse_mean.text

    late = client.post(
        f"/datasets/{ds}/records",
        content=make_csv(_rows(OLD + timedelta(hours=5), 1, 2)),
        headers={"content-type": "text/csv"},
    )
    assert late.status_code == 409, late.text
    assert "retention" in late.json()["error"]["message"]
    assert client.get(f"/datasets/{ds}").json()["n_records"] == len(rows)

    recent = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    fresh = _rows(recent, 1, 3)
    assert upload_csv(client, ds, make_csv(fresh))["accepted"] == len(fresh)
    assert _raw_count(engine, ds) == len(fresh)  # this month is kept


def test_without_retention_nothing_is_dropped(client: TestClient, app) -> None:
    engine = app.state.sessionmaker.kw["bind"]
    ds = create_dataset(client, value_bound=30.0)["id"]
    rows = _rows(OLD, 2, 4)
    upload_csv(client, ds, make_csv(rows))
    assert client.get(f"/datasets/{ds}").json()["raw_kept_from"] is None
    assert _raw_count(engine, ds) == len(rows)
    bad = client.post("/datasets", json={"name": "x", "value_bound": 1, "budget_per_user": 1,
                                         "raw_retention_days": 0})  # fmt: skip
    assert bad.status_code == 400
