"""A release's ``useful`` and ``warnings`` (API.md): from public expected widths, the
preview's equal to the release's, stored with it, and releases stored before them still
read in every format."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.releases.models import SlotRelease
from tests.integration.test_release_profiles import N_BUSES, _dataset

HOUR = "2016-03-14T08:00:00"


def _one_hour(**extra: object) -> dict:
    return {"slot_start": HOUR, "epsilon": 0.2, "statistics": ["mean"], "min_users": 5, **extra}


def test_a_release_that_is_mostly_not_useful_says_what_to_change(client: TestClient) -> None:
    ds = _dataset(client)
    body = _one_hour(useful_width=0.5)
    preview = client.post(f"/datasets/{ds}/releases/preview", json=body)
    assert preview.status_code == 200, preview.text
    out = client.post(f"/datasets/{ds}/releases", json=body)
    assert out.status_code == 200, out.text
    release = out.json()
    assert release["useful"] == preview.json()["useful"]
    assert release["useful"]["width"] == 0.5
    assert release["useful"]["records"] < 0.5 and release["useful"]["cells"] == 0
    assert release["warnings"] == preview.json()["warnings"]
    assert any("pool more days (a profile)" in w for w in release["warnings"])
    stored = client.get(f"/releases/{release['release_id']}").json()
    assert stored["useful"] == release["useful"] and stored["warnings"] == release["warnings"]


@pytest.mark.parametrize("statistic", ["mean"])
def test_every_cell_is_useful_at_the_whole_range(client: TestClient, statistic: str) -> None:
    """Every published mean interval is at most the range wide: at useful_width = U every
    released cell is useful, so the useful share is the coverage."""
    ds = _dataset(client)
    out = client.post(f"/datasets/{ds}/releases", json=_one_hour(useful_width=10.0))
    release = out.json()
    assert release["useful"]["cells"] == len(release["grids"]) == 1
    assert release["useful"]["records"] == pytest.approx(release["coverage"]["records"])
    assert release["warnings"] == []
    assert release["grids"][0]["n_users"] == N_BUSES
    # the default width is a fifth of U = 10
    default = client.post(f"/datasets/{ds}/releases/preview", json=_one_hour()).json()
    assert default["useful"]["width"] == 2.0


def test_a_release_stored_before_usefulness_still_reads(client: TestClient, app) -> None:
    ds = _dataset(client)
    release = client.post(f"/datasets/{ds}/releases", json=_one_hour()).json()
    with app.state.sessionmaker() as s:
        row = s.scalars(
            select(SlotRelease).where(SlotRelease.public_id == release["release_id"])
        ).one()
        row.head = {k: v for k, v in row.head.items() if k not in ("useful", "warnings", "profile")}
        s.commit()
    stored = client.get(f"/releases/{release['release_id']}")
    assert stored.status_code == 200, stored.text
    assert stored.json()["useful"] is None and stored.json()["warnings"] == []
    assert stored.json()["profile"] is None
    for fmt in ("csv", "geojson", "datapackage"):
        got = client.get(f"/releases/{release['release_id']}", params={"format": fmt})
        assert got.status_code == 200, (fmt, got.text)
    listed = client.get(f"/datasets/{ds}/releases").json()["releases"][0]
    assert listed["useful"] is None and listed["profile"] is None
