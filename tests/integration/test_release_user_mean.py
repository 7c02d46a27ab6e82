"""``user_mean`` as a release statistic (API.md): each grid's answer follows the
single-grid law (GET /grids/{id}/user_mean at the same share of ε), the budget is charged
once for all the statistics asked, the expected width counts in ``useful``, every format
carries its columns, and an unknown statistic is refused with a 4xx naming the field."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from tests.integration.test_release_profiles import N_BUSES, _accounts, _dataset

HOUR = "2016-03-14T08:00:00"
STATS = ["mean", "variance", "user_mean"]
LAW = ("sensitivity", "noise_scale", "worst_case_bias", "worst_case_error")


def _body(**extra: object) -> dict:
    return {"slot_start": HOUR, "epsilon": 0.9, "statistics": STATS, "min_users": 5, **extra}


def test_user_mean_is_released_with_the_single_grid_law_and_charged_once(
    client: TestClient, app
) -> None:
    ds = _dataset(client, budget=2.0)
    preview = client.post(f"/datasets/{ds}/releases/preview", json=_body())
    assert preview.status_code == 200, preview.text
    out = client.post(f"/datasets/{ds}/releases", json=_body())
    assert out.status_code == 200, out.text
    release = out.json()
    assert release["statistics"] == STATS
    assert release["useful"] == preview.json()["useful"]
    (grid,) = release["grids"]
    assert set(preview.json()["grids"][0]["expected_ci95_widths"]) == set(STATS)
    answer = grid["user_mean"]
    assert answer["statistic"] == "user_mean" and answer["n_users"] == N_BUSES
    assert "unit" in answer and answer["privacy_unit"] == grid["mean"]["privacy_unit"]
    lo, hi = answer["ci95"]
    assert 0.0 <= lo <= answer["estimate"] <= hi <= 10.0
    # the three statistics share the ε equally: their float shares sum to at most it
    shares = [grid[s]["epsilon"] for s in STATS]
    assert shares == [pytest.approx(0.3)] * 3
    assert sum(Decimal(repr(x)) for x in shares) <= Decimal("0.9")
    # the single-grid law at that share (its public parameters; the noise is OpenDP's)
    alone = client.get(f"/grids/{grid['grid_id']}/user_mean", params={"epsilon": answer["epsilon"]})
    assert alone.status_code == 200, alone.text
    # (the release's share of ε is the float at most ε/3; the GET's, the float at most 0.3)
    assert answer["mechanism"] == alone.json()["mechanism"]
    assert {k: answer[k] for k in LAW} == pytest.approx(
        {k: alone.json()[k] for k in LAW}, rel=1e-12
    )
    # the release charged each bus the whole ε once (the GET above charged its own)
    accounts = _accounts(app, ds)
    assert len(accounts) == N_BUSES
    assert set(accounts.values()) == {Decimal("0.9") + Decimal(repr(answer["epsilon"]))}


def test_user_mean_alone_and_its_columns_in_every_format(client: TestClient) -> None:
    ds = _dataset(client)
    out = client.post(f"/datasets/{ds}/releases", json=_body(statistics=["user_mean"]))
    assert out.status_code == 200, out.text
    release = out.json()
    (grid,) = release["grids"]
    assert "mean" not in grid and grid["user_mean"]["epsilon"] == pytest.approx(0.9)
    rid = release["release_id"]
    rows = list(csv.DictReader(io.StringIO(client.get(f"/releases/{rid}?format=csv").text)))
    assert float(rows[0]["user_mean"]) == grid["user_mean"]["estimate"]
    lo, hi = float(rows[0]["user_mean_ci95_lo"]), float(rows[0]["user_mean_ci95_hi"])
    assert [lo, hi] == grid["user_mean"]["ci95"]
    feature = client.get(f"/releases/{rid}?format=geojson").json()["features"][0]
    assert feature["properties"]["user_mean"] == grid["user_mean"]["estimate"]
    assert feature["properties"]["user_mean_ci95"] == grid["user_mean"]["ci95"]
    package = client.get(f"/releases/{rid}?format=datapackage").json()
    fields = [f["name"] for f in package["resources"][0]["schema"]["fields"]]
    assert "user_mean" in fields


@pytest.mark.parametrize("statistics", [["median"], ["mean", "mean"], []])
def test_an_unknown_or_repeated_statistic_is_refused_and_charges_nobody(
    client: TestClient, app, statistics: list[str]
) -> None:
    ds = _dataset(client)
    out = client.post(f"/datasets/{ds}/releases", json=_body(statistics=statistics))
    assert out.status_code == 400 and "statistics" in out.text, out.text
    assert _accounts(app, ds) == {}
