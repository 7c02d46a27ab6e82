"""A synthetic ITMS-like city as raw records, ingestible like real data (docs/math.md §7, §8).

The papers' grids are hexagon-and-timeslot cells of bus speed records (002 §II).
:func:`synthetic_city` places ``n_buses`` buses on the H3 cells of a disk around a
city centre for ``n_hours`` consecutive hours and writes one record per reading,
with the columns the service ingests (``user_id,timestamp,lat,lon,value``):

* cells: the centre cell at ``resolution`` and its ``ring``-disk (7 cells for
  ``ring = 1``); each bus has a route: half the buses run *through* the centre
  (ring cell, centre, opposite ring cell), the others along two adjacent ring
  cells, or stay in one cell;
* each bus is active in each hour with probability ``p_active``; in an active
  hour it sends ``T`` readings, ``T`` drawn from the ITMS-like counts of 002 §IV-B
  (:func:`app.synth.itms.itms_counts`) times ``count_scale`` (at least 1), so the
  per-grid counts are as heavy-tailed as the paper's; the readings get distinct
  seconds of the hour, and are split along the route in time order with
  Dirichlet(1) proportions (a bus moves through its cells in order);
* speeds: ``N(μ + b_bus + c_cell,hour, σ²)`` projected onto ``[0, U]`` with the ITMS
  ``μ = 20.66769``, ``σ² = 115.135`` (002 §IV-C) plus small bus and cell-hour
  offsets (``N(0, 2²)`` and ``N(0, 3²)``), so users are not exactly i.i.d.;
* positions: a uniform point in a hexagon shrunk by ``0.7`` towards its centre
  (checked to map back to the same cell; else the centre itself), 6 decimals;
* timestamps: ISO 8601 with the zone's offset (``Asia/Kolkata`` by default).

Everything is a function of the caller's seeded numpy ``Generator``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import h3
import numpy as np

from app.synth.itms import ITMS_MEAN, ITMS_U, ITMS_VARIANCE, itms_counts
from app.synth.random_source import SynthRandom

CITY_COLUMNS = ("user_id", "timestamp", "lat", "lon", "value")


@dataclass(frozen=True)
class CityConfig:
    """Parameters of :func:`synthetic_city` (defaults: a few hundred buses, 7 cells, 6 h)."""

    n_buses: int = 300
    n_hours: int = 6
    ring: int = 1
    resolution: int = 8
    center: tuple[float, float] = (21.1702, 72.8311)  # Surat, India (an ITMS city)
    start: str = "2024-03-04T07:00:00"
    timezone: str = "Asia/Kolkata"
    p_active: float = 0.75
    count_scale: float = 0.5
    U: float = ITMS_U
    mean: float = ITMS_MEAN
    variance: float = ITMS_VARIANCE
    bus_sd: float = 2.0
    cell_hour_sd: float = 3.0
    base_counts: tuple[int, ...] = field(default_factory=lambda: tuple(itms_counts().tolist()))

    def __post_init__(self) -> None:
        if self.n_buses < 1 or self.n_hours < 1 or self.ring < 0:
            raise ValueError("need n_buses >= 1, n_hours >= 1 and ring >= 0")
        if not 0.0 < self.p_active <= 1.0 or self.count_scale <= 0:
            raise ValueError("need 0 < p_active <= 1 and count_scale > 0")


@dataclass(frozen=True)
class CityRecords:
    """Records in columns (one entry per record), sorted by bus then time."""

    user_id: np.ndarray
    timestamp: list[str]
    lat: np.ndarray
    lon: np.ndarray
    value: np.ndarray
    cells: tuple[str, ...]
    config: CityConfig

    def __len__(self) -> int:
        return int(self.value.size)


def _routes(cells: Sequence[str], n_buses: int, rng: SynthRandom) -> list[list[int]]:
    """Routes as lists of cell indexes (index 0 is the centre)."""
    ring = list(range(1, len(cells)))
    routes: list[list[int]] = []
    kinds = np.asarray(rng.random(n_buses))
    starts = np.asarray(rng.integers(0, max(len(ring), 1), size=n_buses))
    for kind, s in zip(kinds.tolist(), starts.tolist(), strict=True):
        if not ring:
            routes.append([0])
        elif kind < 0.5:  # through the centre to the opposite side (when it exists)
            a = ring[s]
            b = ring[(s + len(ring) // 2) % len(ring)]
            routes.append([a, 0, b] if b != a else [a, 0])
        elif kind < 0.85:
            routes.append([ring[s], ring[(s + 1) % len(ring)]])
        else:
            routes.append([ring[s]])
    return routes


def _point_in(cell: str, rng: SynthRandom) -> tuple[float, float]:
    """A uniform point of the cell's hexagon shrunk by 0.7 towards its centre."""
    clat, clon = h3.cell_to_latlng(cell)
    poly = h3.cell_to_boundary(cell)
    k = int(rng.integers(0, len(poly)))
    a, b = poly[k], poly[(k + 1) % len(poly)]
    u, v = (float(x) for x in np.asarray(rng.random(2)))
    if u + v > 1.0:
        u, v = 1.0 - u, 1.0 - v
    lat = clat + 0.7 * (u * (a[0] - clat) + v * (b[0] - clat))
    lon = clon + 0.7 * (u * (a[1] - clon) + v * (b[1] - clon))
    lat, lon = round(lat, 6), round(lon, 6)
    if h3.latlng_to_cell(lat, lon, h3.get_resolution(cell)) != cell:
        return round(clat, 6), round(clon, 6)
    return lat, lon


def synthetic_city(rng: SynthRandom, config: CityConfig | None = None) -> CityRecords:
    """Draw the records of a synthetic ITMS-like city (see the module docstring)."""
    cfg = config or CityConfig()
    zone = ZoneInfo(cfg.timezone)
    t0 = datetime.fromisoformat(cfg.start)
    t0 = t0.replace(tzinfo=zone) if t0.tzinfo is None else t0.astimezone(zone)
    center = h3.latlng_to_cell(cfg.center[0], cfg.center[1], cfg.resolution)
    disk = [c for c in h3.grid_disk(center, cfg.ring) if c != center]
    # Ring cells in angular order around the centre, so "opposite" is meaningful.
    clat, clon = h3.cell_to_latlng(center)
    disk.sort(key=lambda c: float(np.arctan2(*np.subtract(h3.cell_to_latlng(c), (clat, clon)))))
    cells = [center, *disk]
    routes = _routes(cells, cfg.n_buses, rng)
    base = np.asarray(cfg.base_counts, dtype=np.int64)
    bus_offset = np.asarray(rng.normal(0.0, cfg.bus_sd, size=cfg.n_buses))
    cell_hour = np.asarray(rng.normal(0.0, cfg.cell_hour_sd, size=(len(cells), cfg.n_hours)))
    sd = float(np.sqrt(cfg.variance))

    users: list[str] = []
    stamps: list[str] = []
    lats: list[float] = []
    lons: list[float] = []
    vals: list[np.ndarray] = []
    for bus in range(cfg.n_buses):
        route = routes[bus]
        for hour in range(cfg.n_hours):
            if float(rng.random()) >= cfg.p_active:
                continue
            T = max(1, round(float(base[int(rng.integers(0, base.size))]) * cfg.count_scale))
            seconds = np.sort(np.asarray(rng.choice(3600, size=T, replace=False)))
            share = np.asarray(rng.dirichlet(np.ones(len(route))))
            split = np.asarray(rng.multinomial(T, share), dtype=np.int64)
            where = np.repeat(np.asarray(route, dtype=np.int64), split)
            mu = cfg.mean + bus_offset[bus] + cell_hour[where, hour]
            vals.append(np.clip(np.asarray(rng.normal(mu, sd)), 0.0, cfg.U))
            start = t0 + timedelta(hours=hour)
            for s, ci in zip(seconds.tolist(), where.tolist(), strict=True):
                lat, lon = _point_in(cells[ci], rng)
                users.append(f"bus-{bus:04d}")
                stamps.append((start + timedelta(seconds=s)).isoformat())
                lats.append(lat)
                lons.append(lon)
    value = np.round(np.concatenate(vals) if vals else np.empty(0), 3)
    return CityRecords(
        user_id=np.asarray(users, dtype=object),
        timestamp=stamps,
        lat=np.asarray(lats),
        lon=np.asarray(lons),
        value=value,
        cells=tuple(cells),
        config=cfg,
    )


def synthetic_days(
    rng: SynthRandom, config: CityConfig | None = None, n_days: int = 30
) -> CityRecords:
    """``n_days`` consecutive local days of the city (a month by default): each day the
    ``n_hours`` hours from ``start``'s local time of day, the same buses, routes and
    speeds drawn afresh (a bus need not run the same route every day). Local wall times,
    so a daylight-saving day keeps its hours at the same time of day."""
    cfg = config or CityConfig()
    if n_days < 1:
        raise ValueError("need n_days >= 1")
    first = datetime.fromisoformat(cfg.start)
    if first.tzinfo is not None:  # its local wall time
        first = first.astimezone(ZoneInfo(cfg.timezone)).replace(tzinfo=None)
    days = []
    for d in range(n_days):
        wall = (first + timedelta(days=d)).isoformat()  # naive: local, DST or not
        days.append(synthetic_city(rng, replace(cfg, start=wall)))
    return CityRecords(
        user_id=np.concatenate([d.user_id for d in days]),
        timestamp=[t for d in days for t in d.timestamp],
        lat=np.concatenate([d.lat for d in days]),
        lon=np.concatenate([d.lon for d in days]),
        value=np.concatenate([d.value for d in days]),
        cells=days[0].cells,
        config=cfg,
    )


def records_csv(records: CityRecords, path: Path | None = None) -> str:
    """The records as CSV text with header ``user_id,timestamp,lat,lon,value``.

    Written to ``path`` as well when given.
    """
    out = io.StringIO()
    out.write(",".join(CITY_COLUMNS) + "\n")
    for u, t, la, lo, v in zip(
        records.user_id.tolist(),
        records.timestamp,
        records.lat.tolist(),
        records.lon.tolist(),
        records.value.tolist(),
        strict=True,
    ):
        out.write(f"{u},{t},{la:.6f},{lo:.6f},{v:.3f}\n")
    text = out.getvalue()
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text
