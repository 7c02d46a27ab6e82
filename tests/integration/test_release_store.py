"""How a release is stored (migrations 0011-0013): a small JSON head, the grids as JSON
bytes, the kept sets as columns, both packed (zstd); read back, it is the release that
was answered."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import zstandard
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.releases.kept_sets import KeptSets
from app.releases.models import GRIDS_SHAPE, SlotRelease
from app.releases.packing import unpack
from tests.helpers import create_dataset, upload_csv
from tests.integration.test_release_listing import HOURS, _csv


def _dumps(body: dict) -> str:
    """The JSON of a release but its ``cached`` (keys sorted: GET orders them by its model)."""
    return json.dumps({k: v for k, v in body.items() if k != "cached"}, sort_keys=True)


def test_a_stored_release_reads_back_as_it_was_answered(client: TestClient, app) -> None:
    ds = create_dataset(client, value_bound=10.0, budget_per_user=100.0)["id"]
    assert upload_csv(client, ds, _csv())["rejected"] == 0
    body = {"slot_start": HOURS[0].isoformat(), "slots": 3, "epsilon": 0.5, "min_users": 1}
    posted = client.post(f"/datasets/{ds}/releases", json=body)
    assert posted.status_code == 200, posted.text
    answer = posted.json()
    assert answer["cached"] is False and len(answer["grids"]) == 6
    got = client.get(f"/releases/{answer['release_id']}")
    twin = client.post(f"/datasets/{ds}/releases", json=body)
    for again in (got.json(), twin.json()):
        assert again["cached"] is True
        assert _dumps(again) == _dumps(answer)

    with app.state.engine.connect() as conn:
        row = conn.execute(
            text("SELECT head::text, n_grids, grids, kept, grids_shape FROM slot_releases")
        ).one()
    head = json.loads(row.head)
    assert head["grids"] is None and row.n_grids == 6
    assert list(head) == list(answer)  # the grids keep their place among the keys
    assert orjson.loads(unpack(row.grids)) == answer["grids"]
    assert unpack(row.grids) in got.content  # GET serves the stored grids' bytes as they are
    kept = KeptSets.from_bytes(unpack(row.kept))
    assert list(kept.grid_ids) == [g["grid_id"] for g in answer["grids"]]
    listed = client.get(f"/datasets/{ds}/releases").json()["releases"]
    assert [(r["n_grids"], r["slots"]) for r in listed] == [(6, 3)]
    # Stored in today's shape, so served from the head and the stored bytes, undecoded:
    # the same JSON as decoding and upgrading it gives (the path of a release stored
    # before migration 0014).
    assert row.grids_shape == GRIDS_SHAPE
    with app.state.engine.begin() as conn:
        conn.execute(text("UPDATE slot_releases SET grids_shape = 0"))
    upgraded = client.get(f"/releases/{answer['release_id']}")
    assert upgraded.status_code == 200 and upgraded.json() == got.json()


def test_store_writes_json_bytes_as_json_columns_were_written() -> None:
    """Keys become strings, a NaN becomes null (as ``app.db.engine.json_dumps``)."""
    answer = {"release_id": "r", "grids": [{"mean": math.nan, "n": 1}], "epsilon": 0.1}
    record = SlotRelease()
    kept = KeptSets(
        ["g", "h"], [1, 4], np.array([0, 1, 3]), np.array([7, 9, 8]), np.array([2, 1, 5])
    )
    assert record.store(answer, kept) == unpack(record.grids) == record.grids_json()
    assert isinstance(record.grids, bytes) and isinstance(record.kept, bytes)
    assert record.grids.startswith(zstandard.FRAME_HEADER)
    assert record.kept.startswith(zstandard.FRAME_HEADER)
    assert record.head == {"release_id": "r", "grids": None, "epsilon": 0.1}
    assert record.n_grids == 1
    assert record.answer() == {"release_id": "r", "grids": [{"mean": None, "n": 1}], "epsilon": 0.1}
    assert list(record.answer()) == ["release_id", "grids", "epsilon"]
    # kept sets: per grid its version and each asked user's Γ (0 where not kept)
    assert KeptSets.from_bytes(unpack(record.kept)).as_json() == {
        "g": {"version": 1, "users": {7: 2}},
        "h": {"version": 4, "users": {9: 1, 8: 5}},
    }
    got = record.kept_caps("h", np.array([1, 8, 9, 10]))
    assert got is not None and got[0] == 4 and got[1].tolist() == [0, 5, 1, 0]
    got = record.kept_caps("g", np.array([7]))
    assert got is not None and got[0] == 1 and got[1].tolist() == [2]
    assert record.kept_caps("x", np.array([7])) is None
