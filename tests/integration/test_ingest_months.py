"""Months an upload creates are filled detached and attached before its grids are written:
the records are all there and keyed, duplicates across batches are still found, and a failed
upload leaves no month behind."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.datasets.partitions import stored_months
from app.uploads import service as upload_module
from tests.helpers import create_dataset, make_csv, post_csv, upload_csv
from tests.integration.ingest_support import all_grids, counts


def _tables(app: FastAPI, dataset_id: int) -> list[str]:
    with app.state.sessionmaker() as session:
        return list(
            session.scalars(
                text(
                    "SELECT relname FROM pg_class WHERE relname LIKE :p "
                    "AND relnamespace = current_schema()::regnamespace ORDER BY relname"
                ),
                {"p": f"records_d{dataset_id}_m%"},
            )
        )


def test_an_upload_across_new_months_attaches_them_and_finds_its_duplicates(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload_module, "BATCH_ROWS", 4)
    ds = create_dataset(client)["id"]
    rows = [("a", f"2016-11-30T23:{m:02d}:00Z", 12.97, 77.59, m) for m in range(50, 60)]
    rows += [("a", f"2016-12-01T00:{m:02d}:00Z", 12.97, 77.59, m) for m in range(10)]
    rows += [rows[2], rows[15], ("a", "2016-11-30T22:00:00Z", 12.97, 77.59, 1)]  # back in time
    answer = upload_csv(client, ds, make_csv(rows))
    assert (answer["accepted"], answer["duplicates"]) == (21, 2)
    with app.state.sessionmaker() as session:
        months = stored_months(session, ds)
    assert months == [datetime(2016, m, 1, tzinfo=UTC) for m in (11, 12)] + [
        datetime(2017, 1, 1, tzinfo=UTC)
    ]
    assert counts(app)["records"] == 21
    assert sum(g["n_records"] for g in all_grids(client, ds)) == 21
    again = upload_csv(client, ds, make_csv(rows))  # into the attached months: all stored
    assert (again["accepted"], again["duplicates"]) == (0, 23)


def test_a_failed_upload_leaves_no_month(
    client: TestClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload_module, "BATCH_ROWS", 4)
    ds = create_dataset(client)["id"]
    rows = [("a", f"2016-11-30T23:{m:02d}:00Z", 12.97, 77.59, m) for m in range(50, 60)]
    body = make_csv(rows).encode() + b"b,2016-11-30T23:00:00Z,1,1,\xc3\x28\n"
    assert post_csv(client, ds, body).status_code == 400
    assert _tables(app, ds) == []
    assert counts(app)["records"] == 0
