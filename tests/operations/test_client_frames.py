"""The client's DataFrames (the ``analysis`` extra; ``dev`` brings it, so CI runs these)."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator

import h3
import pytest
from fastapi.testclient import TestClient

import dpgate
from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, load, make_dataset

pd = pytest.importorskip("pandas")

GRID_A = {f"a{i}": [float(i % 9 + 1)] * (1 + i % 3) for i in range(12)}
GRID_B = {f"b{i}": [float(i % 5 + 2)] for i in range(6)}


@pytest.fixture
def dp(pg_client: TestClient) -> Iterator[tuple[dpgate.Client, int]]:
    """A ``dpgate.Client`` talking to the in-process app, and a loaded dataset."""
    ds = make_dataset(pg_client, value_bound=10.0, budget_per_user=10.0)
    load(pg_client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})
    client = dpgate.Client("http://testserver", ADMIN_KEY, transport=pg_client._transport)
    with client:
        yield client, ds


def test_answers_as_a_dataframe(dp: tuple[dpgate.Client, int]) -> None:
    client, ds = dp
    grids = client.grids(ds)
    answers = [client.mean(g.grid_id, 0.5, mechanism="baseline") for g in grids]
    answers.append(client.variance(grids[0].grid_id, 0.5))
    frame = dpgate.answers_dataframe(answers)
    assert list(frame.columns) == list(dpgate.frames.ANSWER_COLUMNS)
    assert len(frame) == 3
    assert list(frame["statistic"]) == ["mean", "mean", "variance"]
    assert list(frame["estimate"]) == [a.estimate for a in answers]
    for lo, hi, a in zip(frame["ci95_lo"], frame["ci95_hi"], answers, strict=True):
        assert [lo, hi] == a.ci95 if a.ci95 is not None else math.isnan(lo) and math.isnan(hi)
    assert frame["n_users_charged"].tolist() == [a.n_users_charged for a in answers]
    stored = dpgate.answers_dataframe(client.queries())  # the key's stored answers
    assert sorted(stored["query_id"]) == sorted(a.query_id for a in answers)
    assert pd.api.types.is_float_dtype(frame["epsilon"])
    # where and when each answer is: the grid's cell and its local slot start
    by_id = {g.grid_id: g for g in grids}
    for row in frame.itertuples():
        assert row.h3_cell == by_id[row.grid_id].h3_cell
        assert row.slot_start == pd.Timestamp(by_id[row.grid_id].slot_start) == pd.Timestamp(HOUR)
    assert list(stored["h3_cell"].sort_values()) == sorted(frame["h3_cell"])


def test_the_release_list_of_a_dataset(dp: tuple[dpgate.Client, int]) -> None:
    client, ds = dp
    made = [
        client.release(ds, HOUR.isoformat(), epsilon=e, min_users=1, statistics=["mean"])
        for e in (0.25, 0.5)
    ]
    listed = client.releases(ds, limit=1)  # every page followed
    assert [r.release_id for r in listed] == [m.release_id for m in reversed(made)]
    assert [r.epsilon for r in listed] == [0.5, 0.25] and listed[0].n_grids == len(made[1].grids)
    assert client.get_release(listed[0].release_id).grids[0].mean is not None


def test_a_release_as_a_dataframe_and_a_geodataframe(dp: tuple[dpgate.Client, int]) -> None:
    client, ds = dp
    release = client.release(ds, HOUR.isoformat(), epsilon=0.5, min_users=1, statistics=["mean"])
    frame = release.to_dataframe()
    assert list(frame.columns) == list(dpgate.frames.RELEASE_COLUMNS)
    by_cell = {g.h3_cell: g for g in release.grids}
    assert (
        set(frame["h3_cell"])
        == set(by_cell)
        == {h3.latlng_to_cell(*c, 8) for c in (CELL_A, CELL_B)}
    )
    for row in frame.itertuples():
        grid = by_cell[row.h3_cell]
        assert row.mean == grid.mean.estimate and row.n_users == grid.n_users
        assert (row.mean_ci95_lo, row.mean_ci95_hi) == tuple(grid.mean.ci95)
        assert math.isnan(row.variance) and math.isnan(row.variance_ci95_lo)  # not asked
        assert row.slot_start == pd.Timestamp(HOUR) and row.slot_start.tzinfo is not None
    # the same rows as the server's CSV
    csv = pd.read_csv(io.StringIO(client.release_file(release.release_id, "csv")))
    assert sorted(csv["grid_id"]) == sorted(frame["grid_id"])

    gpd = pytest.importorskip("geopandas")
    from shapely.geometry import Point

    geo = release.to_geodataframe()
    assert isinstance(geo, gpd.GeoDataFrame) and geo.crs.to_epsg() == 4326
    for row in geo.itertuples():
        lat, lon = h3.cell_to_latlng(row.h3_cell)
        assert row.geometry.geom_type == "Polygon" and len(row.geometry.exterior.coords) == 7
        assert row.geometry.contains(Point(lon, lat))
    # the analysis extra draws it (matplotlib, without a display)
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    axes = geo.plot(column="mean", legend=True)
    png = io.BytesIO()
    axes.figure.savefig(png, format="png")
    assert png.getvalue().startswith(b"\x89PNG") and len(png.getvalue()) > 5000
