"""A stored release as GeoJSON, CSV or a Frictionless Data Package (``GET /releases/{id}?format=``).

Pure functions of the served release JSON (API.md): ``{"release_id", "epsilon",
"max_user_cost", "grids": [{"grid_id", "h3_cell", "slot_start", "n_users", "mean",
"variance", "user_mean"}], ...}``, where each statistic is a statistic answer
(``estimate``, ``ci95`` = ``[lo, hi]`` or null) and is absent when not asked, and of the
:class:`Dataset` it belongs to (its ``value_unit``, time zone, privacy unit). Everything
here is post-processing of released answers: it costs no privacy budget.

GeoJSON: one Polygon Feature per grid (its H3 cell boundary, lon/lat, ring closed) with
properties ``grid_id, h3_cell, h3_resolution, slot_start, n_users``, each statistic and
its ``*_ci95`` (``[lo, hi]`` or null; ``user_mean`` only when released) and ``unit``. CSV:
one row per grid with the same columns, each interval split into two numeric columns
``*_ci95_lo`` and ``*_ci95_hi`` (empty when there is no interval or statistic), so a
spreadsheet reads them as numbers. The Data Package describes that CSV by its URL (the
Data Package and Table Schema specifications) and the release's privacy terms.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import h3
from fastapi.responses import Response

GEOJSON_MEDIA_TYPE = "application/geo+json"
CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
STATISTICS = ("mean", "variance", "user_mean")
ALWAYS = ("mean", "variance")  # their columns are there even when not released
HEAD_COLUMNS = ("grid_id", "h3_cell", "h3_resolution", "slot_start", "n_users")
# Release-level fields copied into the FeatureCollection (a GeoJSON "foreign member"),
# by name, so nothing a later release format adds (such as per-user detail) leaks into it.
RELEASE_SUMMARY_FIELDS = (
    "release_id",
    "slot_start",
    "slots",
    "partition",
    "profile",
    "coverage",
    "useful",
    "epsilon",
    "max_user_cost",
    "G1",
    "K",
    "skipped_grids",
)
CI95_MEANING = (
    "Each ci95 holds the cell's true value (the statistic of all its records, before any "
    "clipping) at least 95% of the time, noise and clipping bias included; empty where no "
    "honest interval narrower than the whole range exists."
)


class ReleaseFormat(StrEnum):
    """The representations of ``GET /releases/{id}``."""

    json = "json"
    geojson = "geojson"
    csv = "csv"
    datapackage = "datapackage"


# OpenAPI ``responses`` for the route, so /docs lists the media types.
FORMAT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The stored release: JSON (default), GeoJSON, CSV or a Data Package "
        "(`format`).",
        "content": {
            GEOJSON_MEDIA_TYPE: {
                "schema": {"type": "object", "description": "A GeoJSON FeatureCollection."}
            },
            "text/csv": {"schema": {"type": "string", "description": "One row per grid."}},
        },
    },
    304: {"description": "Not modified: the `If-None-Match` ETag is the release's."},
}


@dataclass(frozen=True)
class ExportContext:
    """What an export says beside the release: its dataset's facts and where it is served
    (``base_url``: the server's address as the request reached it, for the package's URLs)."""

    dataset_name: str
    unit: str | None
    privacy_unit: str
    timezone: str
    value_bound: float
    slot_minutes: int
    base_url: str


def released_statistics(release: Mapping[str, Any]) -> tuple[str, ...]:
    """The statistics with columns: mean and variance always, user_mean when released."""
    asked = set(release.get("statistics") or ())
    return tuple(s for s in STATISTICS if s in ALWAYS or s in asked)


def columns(release: Mapping[str, Any]) -> tuple[str, ...]:
    stats = [(s, f"{s}_ci95_lo", f"{s}_ci95_hi") for s in released_statistics(release)]
    return (*HEAD_COLUMNS, *(c for trio in stats for c in trio), "unit")


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


def grid_properties(
    grid: Mapping[str, Any], statistics: tuple[str, ...], unit: str | None
) -> dict[str, Any]:
    """The columns of one released grid (``*_ci95`` as ``[lo, hi]`` or None)."""
    out = {k: grid[k] for k in HEAD_COLUMNS}
    for s in statistics:
        out[s], out[f"{s}_ci95"] = _estimate(grid, s), _ci95(grid, s)
    out["unit"] = unit
    return out


def cell_polygon(h3_cell: str) -> dict[str, Any]:
    """A GeoJSON Polygon of the cell's boundary: lon/lat, closed, counter-clockwise."""
    ring = [[lon, lat] for lat, lon in h3.cell_to_boundary(h3_cell)]
    return {"type": "Polygon", "coordinates": [[*ring, ring[0]]]}


def release_geojson(release: Mapping[str, Any], unit: str | None) -> dict[str, Any]:
    """The release as a FeatureCollection, one Polygon Feature per released grid."""
    stats = released_statistics(release)
    features = [
        {
            "type": "Feature",
            "id": grid["grid_id"],
            "geometry": cell_polygon(grid["h3_cell"]),
            "properties": grid_properties(grid, stats, unit),
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


def release_csv(release: Mapping[str, Any], unit: str | None) -> str:
    """The release as CSV text with a header row (``\\r\\n`` line ends, RFC 4180)."""
    stats = released_statistics(release)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns(release))
    for grid in release["grids"]:
        row = [grid[k] for k in HEAD_COLUMNS]
        for s in stats:
            ci = _ci95(grid, s)
            row += [_estimate(grid, s), *(ci if ci is not None else (None, None))]
        writer.writerow([_cell(v) for v in (*row, unit)])
    return out.getvalue()


def release_url(base_url: str, release_id: str, fmt: str | None = None) -> str:
    query = "" if fmt is None else f"?format={fmt}"
    return f"{base_url.rstrip('/')}/releases/{release_id}{query}"


def _field(name: str, type_: str, description: str, unit: str | None = None) -> dict[str, Any]:
    out = {"name": name, "type": type_, "description": description}
    return out if unit is None else {**out, "unit": unit}


def _fields(release: Mapping[str, Any], ctx: ExportContext) -> list[dict[str, Any]]:
    profile = release.get("profile")
    when = (
        "the time of day (local) of a typical day pooled over the profile's dates"
        if profile
        else f"start of the {ctx.slot_minutes}-minute slot, local time ({ctx.timezone}) "
        "with its UTC offset"
    )
    units = {"mean": ctx.unit, "user_mean": ctx.unit, "variance": _squared(ctx.unit)}
    meaning = {
        "mean": "mean of every record's value in the cell and slot",
        "variance": "population variance of every record's value in the cell and slot",
        "user_mean": f"mean over the cell's privacy units ({ctx.privacy_unit}) of each "
        "one's own mean value",
    }
    out = [
        _field("grid_id", "string", "Opaque id of the released grid (cell × slot)."),
        _field("h3_cell", "string", "H3 cell index (hexadecimal), the grid's hexagon."),
        _field("h3_resolution", "integer", "H3 resolution of the cell."),
        _field("slot_start", "string" if profile else "datetime", f"The grid's time: {when}."),
        _field("n_users", "integer", f"Privacy units ({ctx.privacy_unit}) with records here "
               "(public occupancy)."),
    ]  # fmt: skip
    for s in released_statistics(release):
        u = units[s]
        out += [
            _field(s, "number", f"Differentially private {meaning[s]}; empty when not "
                   "released.", u),
            _field(f"{s}_ci95_lo", "number", f"Lower end of the {s}'s 95% interval.", u),
            _field(f"{s}_ci95_hi", "number", f"Upper end of the {s}'s 95% interval.", u),
        ]  # fmt: skip
    out.append(_field("unit", "string", "The values' unit (the dataset's value_unit)."))
    return out


def _squared(unit: str | None) -> str | None:
    return None if unit is None else f"({unit})²"


def release_datapackage(release: Mapping[str, Any], ctx: ExportContext) -> dict[str, Any]:
    """A Frictionless (tabular) Data Package: the release's CSV by URL with its Table
    Schema, and the privacy terms under ``privacy`` (a package may carry properties of
    its own)."""
    rid = str(release["release_id"])
    profile = release.get("profile")
    privacy = {
        "model": "user-level differential privacy (pure epsilon-DP, Laplace mechanisms)",
        "privacy_unit": ctx.privacy_unit,
        "epsilon": release.get("epsilon"),
        "epsilon_meaning": "charged per released cell to each privacy unit kept in it, or, "
        "when cells differ (per-cell epsilon), the quantum: a cell charges a whole number of "
        "them, its statistics' epsilons summed",
        "max_user_cost": release.get("max_user_cost"),
        "max_user_cost_meaning": "the most any privacy unit paid for the whole release",
        "mechanism": release.get("mechanism"),
        "statistics": list(released_statistics(release)),
        "ci95": {"level": 0.95, "meaning": CI95_MEANING},
        "value_bound": ctx.value_bound,
        "min_users": release.get("min_users"),
        "partition": release.get("partition"),
        "profile": profile,
        "coverage": release.get("coverage"),
        "useful": release.get("useful"),
    }
    slots = release.get("slots") or 1
    when = f"profile {profile}" if profile else f"{slots} slot(s) from {release['slot_start']}"
    return {
        "profile": "tabular-data-package",
        "name": f"dpgate-release-{rid}".lower(),
        "title": f"{ctx.dataset_name}: differentially private statistics, {when}",
        "description": f"Per H3 cell and time slot, differentially private statistics of "
        f"{ctx.dataset_name!r} (values in {ctx.unit or 'unstated units'}), released by dpgate. "
        + CI95_MEANING,
        "homepage": f"{ctx.base_url.rstrip('/')}/",
        "keywords": ["differential privacy", "H3", "open data"],
        "sources": [{"title": "dpgate release", "path": release_url(ctx.base_url, rid)}],
        "resources": [
            {
                "profile": "tabular-data-resource",
                "name": "grids",
                "path": release_url(ctx.base_url, rid, "csv"),
                "format": "csv",
                "mediatype": "text/csv",
                "encoding": "utf-8",
                "schema": {"fields": _fields(release, ctx), "primaryKey": ["grid_id"]},
            }
        ],
        "privacy": privacy,
    }


def export_response(body: bytes | str, fmt: ReleaseFormat, release_id: str) -> Response:
    """The HTTP response of a rendered CSV or GeoJSON body."""
    if fmt is ReleaseFormat.geojson:
        return Response(body, media_type=GEOJSON_MEDIA_TYPE)
    safe_id = "".join(c for c in release_id if c.isalnum() or c in "-_")
    return Response(
        body,
        media_type=CSV_MEDIA_TYPE,
        headers={"Content-Disposition": f'inline; filename="release-{safe_id}.csv"'},
    )
