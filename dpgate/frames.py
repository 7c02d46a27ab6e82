"""Answers and releases as pandas DataFrames, a release as a GeoPandas GeoDataFrame.

pandas and GeoPandas are optional (``pip install 'dpgate[analysis]'`` brings both); the
server never imports this module. Columns follow the release CSV
(``GET /releases/{id}?format=csv``): each 95% interval is two numeric columns
``*_ci95_lo`` / ``*_ci95_hi`` (NaN without an interval), ``slot_start`` a time-zone
aware timestamp in the dataset's local offset, ``unit`` the values' unit (the dataset's
``value_unit``). Everything here is post-processing of
released answers: it costs no privacy budget.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dpgate.models import Release, StatisticAnswer, StoredAnswer

if TYPE_CHECKING:  # pragma: no cover - types only
    import geopandas
    import pandas

__all__ = [
    "ANSWER_COLUMNS",
    "RELEASE_COLUMNS",
    "answers_dataframe",
    "release_dataframe",
    "release_geodataframe",
]

EXTRA_HINT = "pip install 'dpgate[analysis]'"
ANSWER_COLUMNS = (
    "query_id",
    "grid_id",
    "h3_cell",
    "slot_start",
    "statistic",
    "mechanism",
    "epsilon",
    "estimate",
    "ci95_lo",
    "ci95_hi",
    "sensitivity",
    "noise_scale",
    "worst_case_bias",
    "worst_case_error",
    "n_users",
    "n_users_charged",
    "unit",
    "cached",
)
RELEASE_COLUMNS = (
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
    "unit",
)
_NAN = float("nan")


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"this needs {module}: {EXTRA_HINT}") from exc


def _interval(ci95: list[float] | None) -> tuple[float, float]:
    return (_NAN, _NAN) if ci95 is None else (float(ci95[0]), float(ci95[1]))


def _answer_row(answer: StatisticAnswer) -> dict[str, Any]:
    lo, hi = _interval(answer.ci95)
    row = {name: getattr(answer, name, None) for name in ANSWER_COLUMNS}
    return {**row, "ci95_lo": lo, "ci95_hi": hi}


def answers_dataframe(answers: Iterable[StatisticAnswer | StoredAnswer]) -> pandas.DataFrame:
    """One row per answer (``dp.mean(...)``, ``dp.queries()``), columns ``ANSWER_COLUMNS``
    (``h3_cell`` and ``slot_start`` empty for answers stored before servers sent them)."""
    pd = _require("pandas")
    rows = [_answer_row(a.answer if isinstance(a, StoredAnswer) else a) for a in answers]
    frame = pd.DataFrame(rows, columns=list(ANSWER_COLUMNS))
    frame["slot_start"] = _timestamps(pd, frame["slot_start"])
    return frame


def _timestamps(pd: Any, texts: Iterable[str | None]) -> list[Any]:
    """Each ISO 8601 text as a timestamp with its own offset (a DST change can fall
    between two of them), ``NaT`` for none."""
    return [pd.NaT if s is None else pd.Timestamp(s) for s in texts]


def _release_row(release: Release, grid: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "grid_id": grid.grid_id,
        "h3_cell": grid.h3_cell,
        "h3_resolution": getattr(grid, "h3_resolution", None),
        "slot_start": grid.slot_start or getattr(release, "slot_start", None),
        "n_users": grid.n_users,
    }
    units = set()
    for statistic in ("mean", "variance", "user_mean"):
        answer = getattr(grid, statistic, None)
        if answer is None and statistic == "user_mean":
            continue  # its columns only when released, as in the CSV
        lo, hi = _interval(None if answer is None else answer.ci95)
        row[statistic] = _NAN if answer is None else answer.estimate
        row[f"{statistic}_ci95_lo"], row[f"{statistic}_ci95_hi"] = lo, hi
        units.add(None if answer is None else answer.unit)
    row["unit"] = next((u for u in units if u is not None), None)
    return row


def release_dataframe(release: Release) -> pandas.DataFrame:
    """One row per released grid, columns ``RELEASE_COLUMNS``."""
    pd = _require("pandas")
    rows = [_release_row(release, g) for g in release.grids]
    extra = [
        c for c in ("user_mean", "user_mean_ci95_lo", "user_mean_ci95_hi") if rows and c in rows[0]
    ]
    frame = pd.DataFrame(rows, columns=[*RELEASE_COLUMNS[:-1], *extra, "unit"])
    if getattr(release, "profile", None) is None:  # a profile's is a time of day, "08:00"
        frame["slot_start"] = _timestamps(pd, frame["slot_start"])
    frame["n_users"] = frame["n_users"].astype("Int64")
    frame["h3_resolution"] = frame["h3_resolution"].astype("Int64")
    return frame


def release_geodataframe(release: Release) -> geopandas.GeoDataFrame:
    """:func:`release_dataframe` with each grid's H3 hexagon as its geometry (WGS 84)."""
    gpd = _require("geopandas")
    shapely_geometry = _require("shapely.geometry")
    import h3  # a dependency of the dpgate distribution

    frame = release_dataframe(release)
    hexagons = [
        shapely_geometry.Polygon([(lon, lat) for lat, lon in h3.cell_to_boundary(cell)])
        for cell in frame["h3_cell"]
    ]
    return gpd.GeoDataFrame(frame, geometry=hexagons, crs="EPSG:4326")
