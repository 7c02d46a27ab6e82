"""A stored release as GeoJSON or CSV (``GET /releases/{id}?format=``).

Pure functions of the release JSON (API.md): ``{"release_id", "G1", "K", "epsilon",
"max_user_cost", "grids": [{"grid_id", "h3_cell", "slot_start", "n_users", "mean",
"variance"}], "skipped_grids", "cached"}``, where ``mean`` / ``variance`` are statistic
answers (``estimate``, ``ci95`` = ``[lo, hi]`` or null) and are absent when not asked.
Everything here is post-processing of a released answer: it costs no privacy budget.

GeoJSON: one Polygon Feature per grid (its H3 cell boundary, lon/lat, ring closed) with
properties ``grid_id, h3_cell, h3_resolution, slot_start, n_users, mean, mean_ci95,
variance, variance_ci95`` (a multi-slot release has one Feature per grid and slot);
``mean`` / ``variance`` are the estimates, ``*_ci95`` is ``[lo, hi]`` or null. CSV: one
row per grid with the same columns, each interval split into two numeric columns
``*_ci95_lo`` and ``*_ci95_hi`` (empty when there is no interval or statistic), so a
spreadsheet reads them as numbers.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import h3
from fastapi.responses import JSONResponse, Response

GEOJSON_MEDIA_TYPE = "application/geo+json"
CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
STATISTICS = ("mean", "variance")
CSV_COLUMNS = (
    "grid_id",
    "h3_cell",
    "h3_resolution",
    "slot_start",
    "n_users",
    "mean",
    "mean_ci95_lo",
    "mean_ci95_hi",
    "variance",
    "variance_ci95_lo",
    "variance_ci95_hi",
)
# Release-level fields copied into the FeatureCollection (a GeoJSON "foreign member"),
# by name, so nothing a later release format adds (such as per-user detail) leaks into it.
RELEASE_SUMMARY_FIELDS = (
    "release_id",
    "slot_start",
    "slots",
    "partition",
    "coverage",
    "epsilon",
    "max_user_cost",
    "G1",
    "K",
    "skipped_grids",
)


class ReleaseFormat(StrEnum):
    """The representations of ``GET /releases/{id}``."""

    json = "json"
    geojson = "geojson"
    csv = "csv"


# OpenAPI ``responses`` for the route, so /docs lists the three media types.
FORMAT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The stored release: JSON (default), GeoJSON or CSV (`format`).",
        "content": {
            GEOJSON_MEDIA_TYPE: {
                "schema": {"type": "object", "description": "A GeoJSON FeatureCollection."}
            },
            "text/csv": {"schema": {"type": "string", "description": ", ".join(CSV_COLUMNS)}},
        },
    }
}


def _estimate(grid: Mapping[str, Any], statistic: str) -> float | None:
    answer = grid.get(statistic)
    return None if answer is None else answer["estimate"]


def _ci95(grid: Mapping[str, Any], statistic: str) -> list[float] | None:
    answer = grid.get(statistic)
    interval = None if answer is None else answer.get("ci95")
    return None if interval is None else [interval[0], interval[1]]


def upgraded(release: dict[str, Any]) -> dict[str, Any]:
    """A stored release in today's shape: releases stored before a field existed get it
    from what they kept (each grid's ``h3_resolution`` from its cell, its ``n_users``
    from a statistic, its ``slot_start`` from the release's). The one reader of old
    shapes: the formats below read today's."""
    for grid in release["grids"]:
        grid.setdefault("h3_resolution", h3.get_resolution(grid["h3_cell"]))
        grid.setdefault("slot_start", release.get("slot_start"))
        if "n_users" not in grid:
            stats = [grid[s] for s in STATISTICS if grid.get(s) is not None]
            grid["n_users"] = stats[0]["n_users"] if stats else None
    return release


def grid_properties(grid: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of one released grid (``*_ci95`` as ``[lo, hi]`` or None)."""
    return {
        "grid_id": grid["grid_id"],
        "h3_cell": grid["h3_cell"],
        "h3_resolution": grid["h3_resolution"],
        "slot_start": grid["slot_start"],
        "n_users": grid["n_users"],
        "mean": _estimate(grid, "mean"),
        "mean_ci95": _ci95(grid, "mean"),
        "variance": _estimate(grid, "variance"),
        "variance_ci95": _ci95(grid, "variance"),
    }


def cell_polygon(h3_cell: str) -> dict[str, Any]:
    """A GeoJSON Polygon of the cell's boundary: lon/lat, closed, counter-clockwise."""
    shape = h3.cells_to_geo([h3_cell])
    return {
        "type": "Polygon",
        "coordinates": [[[lon, lat] for lon, lat in ring] for ring in shape["coordinates"]],
    }


def release_geojson(release: Mapping[str, Any]) -> dict[str, Any]:
    """The release as a FeatureCollection, one Polygon Feature per released grid."""
    features = [
        {
            "type": "Feature",
            "id": grid["grid_id"],
            "geometry": cell_polygon(grid["h3_cell"]),
            "properties": grid_properties(grid),
        }
        for grid in release["grids"]
    ]
    summary = {k: release[k] for k in RELEASE_SUMMARY_FIELDS if k in release}
    return {"type": "FeatureCollection", "release": summary, "features": features}


def _cell(value: Any) -> Any:
    """A CSV cell: empty for None, ``repr`` for floats (shortest exact round-trip)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value


def release_csv_rows(release: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per grid, keyed by :data:`CSV_COLUMNS`."""
    rows = []
    for grid in release["grids"]:
        props = grid_properties(grid)
        row = {
            k: props[k] for k in ("grid_id", "h3_cell", "h3_resolution", "slot_start", "n_users")
        }
        for statistic in STATISTICS:
            lo_hi = props[f"{statistic}_ci95"] or [None, None]
            row[statistic] = props[statistic]
            row[f"{statistic}_ci95_lo"], row[f"{statistic}_ci95_hi"] = lo_hi
        rows.append(row)
    return rows


def release_csv(release: Mapping[str, Any]) -> str:
    """The release as CSV text with a header row (``\\r\\n`` line ends, RFC 4180)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for row in release_csv_rows(release):
        writer.writerow({k: _cell(v) for k, v in row.items()})
    return out.getvalue()


def release_response(release: Mapping[str, Any], fmt: ReleaseFormat | str) -> Response:
    """The HTTP response for ``format=fmt`` (a ``ReleaseFormat`` or its value)."""
    fmt = ReleaseFormat(fmt)
    if fmt is ReleaseFormat.geojson:
        return JSONResponse(release_geojson(release), media_type=GEOJSON_MEDIA_TYPE)
    if fmt is ReleaseFormat.csv:
        safe_id = "".join(c for c in str(release["release_id"]) if c.isalnum() or c in "-_")
        name = f"release-{safe_id}.csv"
        return Response(
            release_csv(release),
            media_type=CSV_MEDIA_TYPE,
            headers={"Content-Disposition": f'inline; filename="{name}"'},
        )
    return JSONResponse(dict(release))
