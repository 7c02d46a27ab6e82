"""GeoJSON, CSV and the Data Package of a stored release, from hand-built releases in the
API.md shape."""

from __future__ import annotations

import csv
import io
import itertools
import json
from typing import Any

import h3
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.releases import formats
from app.releases.formats import STATISTICS

# Three res-8 cells in Austin: two neighbours and one a few km away.
CELL_A = h3.latlng_to_cell(30.2672, -97.7431, 8)
CELL_B = h3.grid_ring(CELL_A, 1)[0]
CELL_C = h3.latlng_to_cell(30.3300, -97.8000, 8)
UNIT = "km/h"
CONTEXT = formats.ExportContext(
    dataset_name="Austin buses",
    unit=UNIT,
    privacy_unit="user-day",
    timezone="America/Chicago",
    value_bound=65.0,
    slot_minutes=60,
    base_url="https://data.example.org/dpgate",
)


def answer(estimate: float, ci95: list[float] | None, n_users: int, statistic: str) -> dict:
    """A statistic answer as the query endpoints give it (fields the formats ignore too)."""
    return {
        "grid_id": "ignored",
        "statistic": statistic,
        "mechanism": "clip",
        "epsilon": 0.5,
        "estimate": estimate,
        "sensitivity": 1.25,
        "noise_scale": 2.5,
        "worst_case_bias": None,
        "worst_case_error": None,
        "ci95": ci95,
        "n_users": n_users,
        "n_users_charged": n_users,
        "cached": False,
    }


def make_release() -> dict[str, Any]:
    slot = "2026-11-20T08:00:00-06:00"
    return {
        "release_id": "3f2a9c",
        "G1": 2,
        "K": 1,
        "epsilon": 0.5,
        "max_user_cost": 1.0,
        "grids": [
            {
                "grid_id": "g-a",
                "h3_cell": CELL_A,
                "h3_resolution": 8,
                "slot_start": slot,
                "n_users": 31,
                "mean": answer(6.123456789012345, [4.5, 7.75], 31, "mean"),
                "variance": answer(12.0, [3.0, 21.5], 31, "variance"),
            },
            {
                "grid_id": "g-b",
                "h3_cell": CELL_B,
                "h3_resolution": 8,
                "slot_start": slot,
                "n_users": 12,
                "mean": answer(0.1 + 0.2, None, 12, "mean"),  # no interval (a ci95_note)
                "variance": answer(0.0, [0.0, 9.0], 12, "variance"),
            },
            {
                "grid_id": "g-c",
                "h3_cell": CELL_C,
                "h3_resolution": 8,
                "slot_start": slot,
                "n_users": 40,
                "mean": answer(30.0, [28.0, 30.0], 40, "mean"),
                "variance": answer(1e-17, [0.0, 2.0], 40, "variance"),
            },
        ],
        "skipped_grids": 5,
        "cached": False,
        # Something a release may carry that is not for the formats (user detail).
        "removed": [["g-a", "user-hash-must-not-leak"]],
    }


def mean_only(release: dict[str, Any]) -> dict[str, Any]:
    grids = [{k: v for k, v in g.items() if k != "variance"} for g in release["grids"]]
    return {**release, "grids": grids}


def signed_area(ring: list[list[float]]) -> float:
    return sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in itertools.pairwise(ring)) / 2


# --- GeoJSON ---------------------------------------------------------------------------


def test_geojson_has_one_polygon_per_grid_on_its_h3_cell_in_lon_lat_order() -> None:
    release = make_release()
    out = formats.release_geojson(release, UNIT)
    assert out["type"] == "FeatureCollection"
    assert [f["properties"]["grid_id"] for f in out["features"]] == ["g-a", "g-b", "g-c"]
    for feature, grid in zip(out["features"], release["grids"], strict=True):
        assert feature["type"] == "Feature" and feature["geometry"]["type"] == "Polygon"
        (ring,) = feature["geometry"]["coordinates"]
        assert ring[0] == ring[-1], "a GeoJSON ring is closed"
        # The vertices are the cell's boundary, swapped from h3's (lat, lng) to (lon, lat).
        expected = {
            (round(lng, 12), round(lat, 12)) for lat, lng in h3.cell_to_boundary(grid["h3_cell"])
        }
        assert {(round(x, 12), round(y, 12)) for x, y in ring[:-1]} == expected
        # Read as (lon, lat), the ring's centre lies in the same cell: the order is right
        # whatever the boundary's formula (Austin's lon < -90, so a swap would fail h3).
        lon = sum(p[0] for p in ring[:-1]) / (len(ring) - 1)
        lat = sum(p[1] for p in ring[:-1]) / (len(ring) - 1)
        assert -98 < lon < -97 and 30 < lat < 31
        assert h3.latlng_to_cell(lat, lon, 8) == grid["h3_cell"]
        assert signed_area(ring) > 0, "RFC 7946: exterior rings are counter-clockwise"


def test_geojson_properties_are_the_estimates_and_intervals() -> None:
    out = formats.release_geojson(make_release(), UNIT)
    props = [f["properties"] for f in out["features"]]
    assert set(props[0]) == {
        "grid_id",
        "h3_cell",
        "h3_resolution",
        "slot_start",
        "n_users",
        "mean",
        "mean_ci95",
        "variance",
        "variance_ci95",
        "unit",
    }
    assert props[0] == {
        "grid_id": "g-a",
        "h3_cell": CELL_A,
        "h3_resolution": 8,
        "slot_start": "2026-11-20T08:00:00-06:00",
        "n_users": 31,
        "mean": 6.123456789012345,
        "mean_ci95": [4.5, 7.75],
        "variance": 12.0,
        "variance_ci95": [3.0, 21.5],
        "unit": UNIT,
    }
    assert props[1]["mean_ci95"] is None and props[1]["mean"] == 0.1 + 0.2
    assert props[2]["n_users"] == 40 and props[2]["variance"] == 1e-17


def test_geojson_without_variance_has_null_variance() -> None:
    out = formats.release_geojson(mean_only(make_release()), UNIT)
    for f in out["features"]:
        assert f["properties"]["variance"] is None and f["properties"]["variance_ci95"] is None
        assert f["properties"]["mean"] is not None


def test_geojson_summary_names_the_release_and_never_user_detail() -> None:
    out = formats.release_geojson(make_release(), UNIT)
    assert out["release"] == {
        "release_id": "3f2a9c",
        "epsilon": 0.5,
        "max_user_cost": 1.0,
        "G1": 2,
        "K": 1,
        "skipped_grids": 5,
    }
    assert "user-hash-must-not-leak" not in json.dumps(out)


def test_geojson_of_an_empty_release_is_an_empty_collection() -> None:
    out = formats.release_geojson({**make_release(), "grids": []}, UNIT)
    assert out["features"] == [] and out["type"] == "FeatureCollection"


def test_an_old_stored_release_is_upgraded_from_what_it_kept() -> None:
    """Releases stored before a grid carried ``n_users``, ``slot_start`` or
    ``h3_resolution``: the stored-release reader fills them in, once."""
    old = make_release()
    old["slot_start"] = "2026-11-20T14:00:00+00:00"
    old_fields = ("n_users", "slot_start", "h3_resolution")
    old["grids"] = [{k: v for k, v in g.items() if k not in old_fields} for g in old["grids"]]
    old["grids"][1].pop("variance")
    old["grids"][2] = {k: v for k, v in old["grids"][2].items() if k not in STATISTICS}
    grids = formats.upgraded(old)["grids"]
    assert [g["n_users"] for g in grids] == [31, 12, None]
    assert {g["slot_start"] for g in grids} == {"2026-11-20T14:00:00+00:00"}
    assert [g["h3_resolution"] for g in grids] == [8, 8, 8]
    props = formats.grid_properties(grids[0], ("mean", "variance"), UNIT)
    assert (props["n_users"], props["h3_resolution"]) == (31, 8)


# --- CSV -------------------------------------------------------------------------------


def read_csv(text: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    return list(reader.fieldnames or []), list(reader)


def test_csv_has_one_row_per_grid_with_the_documented_columns() -> None:
    release = make_release()
    header, rows = read_csv(formats.release_csv(release, UNIT))
    assert header == list(formats.columns(release))
    assert [r["grid_id"] for r in rows] == ["g-a", "g-b", "g-c"]
    assert [r["h3_cell"] for r in rows] == [CELL_A, CELL_B, CELL_C]
    assert rows[0]["slot_start"] == "2026-11-20T08:00:00-06:00"
    assert [int(r["n_users"]) for r in rows] == [31, 12, 40]
    # Numbers round-trip exactly (shortest repr).
    for row, grid in zip(rows, release["grids"], strict=True):
        assert float(row["mean"]) == grid["mean"]["estimate"]
        assert float(row["variance"]) == grid["variance"]["estimate"]
        assert float(row["variance_ci95_lo"]) == grid["variance"]["ci95"][0]
        assert float(row["variance_ci95_hi"]) == grid["variance"]["ci95"][1]
    assert (float(rows[0]["mean_ci95_lo"]), float(rows[0]["mean_ci95_hi"])) == (4.5, 7.75)
    # No interval: both ends empty, the estimate still there.
    assert rows[1]["mean_ci95_lo"] == rows[1]["mean_ci95_hi"] == ""
    assert float(rows[1]["mean"]) == 0.1 + 0.2


def test_csv_matches_the_geojson_properties() -> None:
    release = make_release()
    _, rows = read_csv(formats.release_csv(release, UNIT))
    features = formats.release_geojson(release, UNIT)["features"]
    for row, f in zip(rows, features, strict=True):
        p = f["properties"]
        for stat in ("mean", "variance"):
            ci = p[f"{stat}_ci95"]
            got = [row[f"{stat}_ci95_lo"], row[f"{stat}_ci95_hi"]]
            assert got == (["", ""] if ci is None else [repr(ci[0]), repr(ci[1])])
            assert float(row[stat]) == p[stat]


def test_csv_without_variance_leaves_its_columns_empty() -> None:
    _, rows = read_csv(formats.release_csv(mean_only(make_release()), UNIT))
    assert all(r["variance"] == r["variance_ci95_lo"] == r["variance_ci95_hi"] == "" for r in rows)
    assert all(r["mean"] != "" for r in rows)


def test_csv_of_an_empty_release_is_the_header_only() -> None:
    text = formats.release_csv({**make_release(), "grids": []}, UNIT)
    assert text == ",".join(formats.columns(make_release())) + "\r\n"


# --- The formats as the release endpoints declare them -------------------------------


def test_the_formats_and_their_media_types_are_declared_in_openapi() -> None:
    app = FastAPI()

    @app.get("/releases/{release_id}", responses=formats.FORMAT_RESPONSES)
    def get_release(release_id: str, format: formats.ReleaseFormat = formats.ReleaseFormat.json):
        return {}

    spec = TestClient(app).get("/openapi.json").json()
    op = spec["paths"]["/releases/{release_id}"]["get"]
    assert set(op["responses"]["200"]["content"]) >= {
        "application/json",
        "application/geo+json",
        "text/csv",
    }
    (param,) = [p for p in op["parameters"] if p["name"] == "format"]
    assert param["schema"]["$ref"] == "#/components/schemas/ReleaseFormat"
    assert spec["components"]["schemas"]["ReleaseFormat"]["enum"] == [
        "json",
        "geojson",
        "csv",
        "datapackage",
    ]


def test_csv_filename_keeps_only_safe_characters() -> None:
    resp = formats.export_response(b"", formats.ReleaseFormat.csv, 'a"b\r\n/../c')
    assert resp.headers["content-disposition"] == 'inline; filename="release-abc.csv"'
    geo = formats.export_response(b"{}", formats.ReleaseFormat.geojson, "x")
    assert geo.media_type == formats.GEOJSON_MEDIA_TYPE


def test_user_mean_has_columns_only_when_released_and_every_row_its_unit() -> None:
    release = make_release()
    assert "user_mean" not in formats.columns(release)
    with_user_mean = {**release, "statistics": ["mean", "user_mean"]}
    for grid in with_user_mean["grids"]:
        grid["user_mean"] = answer(5.5, [5.0, 6.0], grid["n_users"], "user_mean")
    header, rows = read_csv(formats.release_csv(with_user_mean, UNIT))
    assert header[-4:] == ["user_mean", "user_mean_ci95_lo", "user_mean_ci95_hi", "unit"]
    assert [(r["user_mean"], r["user_mean_ci95_hi"], r["unit"]) for r in rows] == [
        ("5.5", "6.0", UNIT)
    ] * 3
    props = formats.release_geojson(with_user_mean, UNIT)["features"][0]["properties"]
    assert props["user_mean_ci95"] == [5.0, 6.0] and props["unit"] == UNIT
    _, rows = read_csv(formats.release_csv(release, None))
    assert {r["unit"] for r in rows} == {""}


def test_the_data_package_describes_the_csv_and_the_privacy_terms() -> None:
    release = {**make_release(), "mechanism": "auto", "statistics": ["mean", "variance"],
               "slot_start": "2026-11-20T08:00:00-06:00", "coverage": {"records": 0.9,
               "users": 0.8}, "profile": None}  # fmt: skip
    package = formats.release_datapackage(release, CONTEXT)
    (resource,) = package["resources"]
    assert resource["path"] == "https://data.example.org/dpgate/releases/3f2a9c?format=csv"
    fields = resource["schema"]["fields"]
    assert [f["name"] for f in fields] == list(formats.columns(release))
    units = {f["name"]: f.get("unit") for f in fields}
    assert units["mean_ci95_lo"] == UNIT and units["variance"] == "(km/h)²"
    assert units["n_users"] is None and all(f["description"] for f in fields)
    assert {f["name"]: f["type"] for f in fields}["slot_start"] == "datetime"
    terms = package["privacy"]
    assert (terms["privacy_unit"], terms["max_user_cost"], terms["epsilon"]) == (
        "user-day",
        1.0,
        0.5,
    )
    assert terms["ci95"]["level"] == 0.95 and terms["coverage"] == {"records": 0.9, "users": 0.8}
    assert "user-hash-must-not-leak" not in json.dumps(package)
    profile = {"from": "2026-11-02", "to": "2026-11-27", "days": "weekdays", "n_days": 20}
    typical = formats.release_datapackage({**release, "profile": profile}, CONTEXT)
    typical_fields = {f["name"]: f for f in typical["resources"][0]["schema"]["fields"]}
    assert typical_fields["slot_start"]["type"] == "string"
    assert typical["privacy"]["profile"] == profile
