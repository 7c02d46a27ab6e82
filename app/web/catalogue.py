"""The catalogue of public releases (``GET /``): an HTML page from ``GET /public/releases``' rows,
readable without a key, with no script and nothing from outside this server."""

from __future__ import annotations

from datetime import datetime, timedelta
from html import escape
from typing import Any

from sqlalchemy.orm import Session

from app.releases.public import release_links
from app.releases.public_listing import public_page

PAGE = 100
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def rounded(x: float | None) -> str:
    """Two significant digits below 10, three above: 0.89, 7.1, 12.5, 140."""
    if x is None:
        return "—"
    if x == 0:
        return "0"
    return f"{x:.{2 if abs(x) < 10 else 3}g}" if abs(x) < 1000 else f"{x:,.0f}"


def percent(share: float | None) -> str:
    if share is None:
        return "—"
    p = share * 100
    return "<1%" if 0 < p < 1 else ">99%" if 99 < p < 100 else f"{p:.0f}%"


def _offset(moment: datetime) -> str:
    text = moment.strftime("%z")  # +0530
    sign = "−" if text.startswith("-") else "+"
    return f"UTC{sign}{text[1:3]}:{text[3:5]}" if text else ""


def profile_label(profile: dict[str, Any], time_of_day: str) -> str:
    """ "typical weekday 08:00, 20 days" (a profile: one typical day)."""
    days = profile.get("days", "all")
    kind = {"all": "day", "weekdays": "weekday", "weekends": "weekend day"}.get(
        days if isinstance(days, str) else ""
    )
    if kind is None and isinstance(days, list):
        kind = "/".join(WEEKDAYS[d - 1] for d in days if isinstance(d, int) and 1 <= d <= 7)
    n_days = profile.get("n_days")
    over = f", {n_days} days" if n_days else ""
    return f"typical {kind or 'day'} {time_of_day[:5]}{over}"


def when_label(row: dict[str, Any]) -> str:
    """The release's time in the dataset's local time: "Tue 2024-03-05, 08:00–09:00
    (UTC−06:00)", "… all day (24 slots of 60 min)", or a profile's typical day."""
    if row.get("profile"):
        return profile_label(row["profile"], str(row["slot_start"]))
    try:
        start = datetime.fromisoformat(str(row["slot_start"]))
    except ValueError:
        return str(row["slot_start"])
    minutes = (row.get("slot_minutes") or 60) * (row.get("slots") or 1)
    end = start + timedelta(minutes=minutes)
    day = f"{WEEKDAYS[start.weekday()]} {start:%Y-%m-%d}"
    slots = row.get("slots") or 1
    if slots > 1 and minutes == 1440 and start.strftime("%H:%M") == "00:00":
        span = f"all day ({slots} slots of {row.get('slot_minutes') or 60} min)"
    else:
        more = f" ({slots} slots)" if slots > 1 else ""
        span = f"{start:%H:%M}–{end:%H:%M}{more}"
    return f"{day}, {span} ({_offset(start)})"


def _useful(row: dict[str, Any]) -> str:
    useful = row.get("useful")
    if not isinstance(useful, dict) or useful.get("records") is None:
        return "—"
    unit = f" {row['value_unit']}" if row.get("value_unit") else ""
    width = useful.get("width")
    narrow = f" (ci95 at most {rounded(width)}{unit} wide)" if width is not None else ""
    return f"{percent(useful['records'])} of records{narrow}"


def _card(row: dict[str, Any], links: dict[str, str]) -> str:
    cov = row.get("coverage") or {}
    unit = row.get("value_unit") or "no unit stated"
    stats = ", ".join(row.get("statistics") or [])
    facts = [
        ("When", when_label(row)),
        ("Statistics", f"{stats} ({unit}), {row['n_grids']} cells"),
        ("Privacy", f"ε {rounded(row['epsilon'])} per cell, at most "
                    f"{rounded(row.get('max_user_cost'))} per {row['privacy_unit']}"),
        ("Coverage", f"{percent(cov.get('records'))} of records, "
                     f"{percent(cov.get('users'))} of users"),
        ("Useful", _useful(row)),
    ]  # fmt: skip
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    names = {"map": "Map", "csv": "CSV", "geojson": "GeoJSON", "json": "JSON",
             "datapackage": "Data Package"}  # fmt: skip
    anchors = " ".join(
        f'<a href="{escape(links[k])}"{" class=primary" if k == "map" else ""}>{v}</a>'
        for k, v in names.items()
    )
    title = escape(row["dataset_name"])
    return (
        f'<article id="r-{escape(row["release_id"])}"><h2>{title}</h2><dl>{dl}</dl>'
        f'<p class="links">{anchors}</p><p class="made">release {escape(row["release_id"])}, '
        f"made {escape(str(row['created_at'])[:16].replace('T', ' '))}</p></article>"
    )


PAGE_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dpgate — public releases</title>
<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/static/catalogue.css">
<link rel="alternate" type="application/json" href="/public/releases">
</head><body><header><h1>Public releases</h1>
<p>Statistics per map cell (H3 hexagon) and time slot, released with <strong>user-level
differential privacy</strong>: each value carries calibrated noise, so that no one person's
data can be told from it, and a 95% interval (ci95) that holds the true value at least 95%
of the time. ε is the privacy cost per cell; the cost per person is at most the figure given.
Coverage is the share of the slot's records in released cells; useful, the share in cells
whose intervals are narrow. Machine-readable: <a href="/public/releases">/public/releases</a>
and each release's Data Package; the API is described at <a href="/docs">/docs</a>.</p>
</header><main>{cards}</main><footer>{more}</footer></body></html>
"""


def catalogue_page(session: Session, base: str, offset: int) -> str:
    rows, more = public_page(session, None, limit=PAGE, offset=offset)
    cards = "".join(_card(r, release_links(base, r["release_id"])) for r in rows)
    if not rows:
        cards = (
            '<p class="empty">No release is public yet. An admin publishes one with '
            '<code>PATCH /releases/{release_id}</code> and <code>{"public": true}</code>.</p>'
        )
    nav = f'<a href="/?offset={offset + PAGE}">Older releases</a>' if more else ""
    return PAGE_HTML.replace("{cards}", cards).replace("{more}", nav)
