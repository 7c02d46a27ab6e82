"""``/map`` draws real stored releases in a real browser with no network."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import h3
import httpx
from fastapi import FastAPI

from tests.browser.cdp import Page
from tests.browser.map_city import (
    EPSILON,
    HOURS,
    RELEASED,
    SKIPPED,
    City,
    admin_client,
    make_city,
    make_dataset,
)

DRAWN = "['drawn', 'error'].includes(document.body.dataset.state) && document.body.dataset.state"


def open_map(page: Page, base_url: str, city: City, release_id: str) -> str:
    """Open the map on ``release_id``; the status line once drawn."""
    page.navigate(f"{base_url}/map#release={quote(release_id)}&key={quote(city.key)}")
    return wait_drawn(page, release_id)


def wait_drawn(page: Page, release_id: str) -> str:
    page.wait_for(
        f"document.body.dataset.state === 'drawn' && location.hash.includes('{release_id}')"
        " || document.body.dataset.state === 'error'",
        what=f"the map to draw release {release_id}",
    )
    status = page.evaluate("document.getElementById('status').textContent")
    assert page.evaluate("document.body.dataset.state") == "drawn", status
    return status


def text_of(page: Page, selector: str) -> str:
    return page.evaluate(f"document.querySelector({selector!r}).textContent")


def hover(page: Page, selector: str) -> str:
    """Move the mouse onto the element's centre; the tooltip's text."""
    x, y = page.evaluate(
        f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect();"
        " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
    )
    page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
    page.wait_for(
        "!document.getElementById('tooltip').hidden && document.getElementById('tooltip')"
        ".textContent.length > 0",
        what="the hover details",
    )
    return page.evaluate("document.getElementById('tooltip').textContent")


def cells_drawn(page: Page) -> list[list]:
    return page.evaluate(
        "[...document.querySelectorAll('#map path.cell')].map(p => [p.dataset.gridId,"
        " p.getAttribute('fill'), p.dataset.certainty, p.getBBox().width])"
    )


def phone(page: Page, on: bool) -> None:
    """A 375 px wide phone screen (or the desktop's again)."""
    if on:
        page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 375, "height": 800, "deviceScaleFactor": 2, "mobile": True},
        )
    else:
        page.send("Emulation.clearDeviceMetricsOverride")


def test_a_public_release_draws_without_a_key_on_desktop_and_phone(
    page: Page, live_url: str, tmp_path: Path
) -> None:
    city = make_city(live_url)
    release_id = city.releases[1]  # 08:00
    with city.client(live_url) as api:
        release = api.get(f"/releases/{release_id}").json()
    with admin_client(live_url) as admin:
        assert admin.patch(f"/releases/{release_id}", json={"public": True}).status_code == 200
    grids = {g["grid_id"]: g for g in release["grids"]}

    page.navigate(f"{live_url}/map#release={quote(release_id)}")
    status = wait_drawn(page, release_id)
    page.screenshot(tmp_path / "map-public.png", full_page=True)
    assert f"{len(grids)} cells drawn, {len(SKIPPED)} with too few users" in status
    assert "Tue 2024-03-05, 08:00–09:00 (UTC+00:00)" in status
    cells = cells_drawn(page)
    assert sorted(c[0] for c in cells) == sorted(grids)
    assert all(c[3] > 10 for c in cells), "hexagons drawn too small to see"
    # the context: every cell ever occupied, drawn as one path; the slot's thin cells hatched
    assert int(page.evaluate("document.body.dataset.footprint")) == len(RELEASED) + len(SKIPPED)
    skipped = page.evaluate(
        "[...document.querySelectorAll('#map path.skipped')].map(p => p.dataset.cell)"
    )
    assert sorted(skipped) == SKIPPED
    for grid_id, _, certainty, _ in cells:  # washed out when the interval is over 20% of U
        ci = grids[grid_id]["mean"]["ci95"]
        expected = "none" if ci is None else "wide" if ci[1] - ci[0] > 6.0 else "sure"
        assert certainty == expected, (grid_id, ci)
    labels = page.evaluate("[...document.querySelectorAll('#map text.value')].length")
    assert labels == len(grids), "each hexagon with room shows its value"

    legend = text_of(page, "#legend")
    means = [g["mean"]["estimate"] for g in grids.values()]
    assert "Mean (m/s): colours fitted to" in legend and "km/h" not in legend
    lo, hi = (float(x) for x in legend.split("fitted to ")[1].split(" m/s")[0].split("–"))
    assert lo <= min(means) and max(means) <= hi and hi - lo < 30, (lo, hi)
    facts = text_of(page, "#facts")
    assert "ε = 2.9 per cell" in facts and "cost per user at most 2.9" in facts
    assert str(EPSILON)[:6] not in facts + status, "numbers must be rounded for people"
    link = page.evaluate("document.getElementById('public-link').value")
    assert link == f"{live_url}/map#release={release_id}"
    assert page.evaluate("document.getElementById('share').hidden") is False

    first = release["grids"][0]
    tip = hover(page, f'#map path.cell[data-grid-id="{first["grid_id"]}"]')
    assert f"Mean {first['mean']['estimate']:.1f} m/s" in tip and "08:00–09:00" in tip
    assert f"{first['n_users']} users" in tip and first["h3_cell"] in tip

    # the whole range on request, said in the legend
    page.evaluate("document.getElementById('fixed-scale').click()")
    page.wait_for("document.getElementById('legend').textContent.includes('whole range')")
    assert "0–30 m/s" in text_of(page, "#legend")
    page.evaluate("document.getElementById('fixed-scale').click()")

    phone(page, True)
    page.navigate("about:blank")
    page.navigate(f"{live_url}/map#release={quote(release_id)}")
    wait_drawn(page, release_id)
    shot = page.screenshot(tmp_path / "map-public-phone.png", full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 375, "no sideways scrolling"
    assert page.evaluate("document.getElementById('map').getBoundingClientRect().width") > 300
    phone(page, False)
    outside = [u for u in page.requested_urls() if not u.startswith(live_url + "/")]
    assert not outside, f"the map asked for something the server does not serve: {outside}"
    assert page.errors() == [], "the map page logged errors"
    assert shot.stat().st_size > 20_000, "the screenshot looks blank"


def test_a_private_release_asks_for_a_key(page: Page, live_url: str, tmp_path: Path) -> None:
    city = make_city(live_url)
    page.navigate(f"{live_url}/map#release={quote(city.releases[0])}")
    page.wait_for("document.body.dataset.state === 'needs-key'", what="the request for a key")
    assert "not public: enter an API key" in text_of(page, "#status")
    page.screenshot(tmp_path / "map-needs-key.png", full_page=True)
    page.evaluate(
        f"document.getElementById('key').value = {city.key!r};"
        "document.getElementById('open-release').requestSubmit()"
    )
    wait_drawn(page, city.releases[0])
    assert page.evaluate("document.getElementById('share').hidden") is True
    assert page.evaluate("location.hash") == f"#release={city.releases[0]}"  # no key there


def test_map_lists_the_releases_and_steps_through_the_hours(
    page: Page, live_url: str, tmp_path: Path
) -> None:
    city = make_city(live_url)
    open_map(page, live_url, city, city.releases[1])
    options = page.evaluate(
        "[...document.querySelectorAll('#releases option')].map(o => [o.value, o.selected,"
        " o.textContent])"
    )
    assert [o[0] for o in options] == city.releases  # by slot, though made out of order
    assert [o[1] for o in options] == [False, True, False]
    assert all("ε 2.9" in o[2] and "19 cells" in o[2] for o in options)
    assert "09:00" in text_of(page, "#next-slot") and "07:00" in text_of(page, "#prev-slot")

    page.evaluate("document.getElementById('next-slot').click()")
    wait_drawn(page, city.releases[2])
    assert "09:00–10:00" in text_of(page, "#facts")
    assert page.evaluate("document.getElementById('next-slot').disabled") is True
    page.screenshot(tmp_path / "map-0900.png", full_page=True)
    uncertain = page.evaluate(
        "document.querySelectorAll('#map path.cell:not([data-certainty=\"sure\"])').length"
    )
    approximate = page.evaluate(
        "[...document.querySelectorAll('#map text.value')].filter(t =>"
        " t.textContent.startsWith('≈')).length"
    )
    assert uncertain > 0 and approximate == uncertain
    page.evaluate(
        "(() => { const s = document.getElementById('releases');"
        f" s.value = '{city.releases[0]}'; s.dispatchEvent(new Event('change')); }})()"
    )
    wait_drawn(page, city.releases[0])
    assert "07:00–08:00" in text_of(page, "#facts")
    assert page.evaluate("document.getElementById('prev-slot').disabled") is True
    assert page.errors() == [], "the map page logged errors"


def test_a_day_release_opens_on_its_first_slot_with_cells_in_local_time(
    page: Page, live_url: str, tmp_path: Path
) -> None:
    """A day of Chicago on the day clocks move forward (23 hours): buttons, facts and
    tooltips say 08:00 and 09:00 local time (UTC−05:00), never the UTC hours 13:00, 14:00."""
    utc = [datetime(2024, 3, 10, h, tzinfo=UTC) for h in (13, 14)]  # 08:00, 09:00 CDT
    ds = make_dataset(live_url, utc, timezone="America/Chicago")
    with admin_client(live_url) as admin:
        body = {"slot_start": "2024-03-10T00:00:00", "slots": 23, "epsilon": 2.0,
                "statistics": ["mean"], "objective": "interval"}  # fmt: skip
        made = admin.post(f"/datasets/{ds}/releases", json=body)
        assert made.status_code == 200, made.text
        release_id = made.json()["release_id"]
        key = admin.post("/keys", json={"name": "v", "role": "viewer"}).json()["key"]
    page.navigate(f"{live_url}/map#release={quote(release_id)}&key={quote(key)}")
    status = wait_drawn(page, release_id)
    page.screenshot(tmp_path / "map-day.png", full_page=True)
    assert "Sun 2024-03-10, 08:00–09:00 (UTC−05:00)" in status
    assert "(one of 23)" in text_of(page, "#facts")
    assert "09:00" in text_of(page, "#next-slot") and "13:00" not in page.evaluate(
        "document.body.innerText"
    )
    tip = hover(page, "#map path.cell")
    assert "08:00–09:00" in tip and "13:00" not in tip
    page.evaluate("document.getElementById('next-slot').click()")
    page.wait_for("document.getElementById('status').textContent.includes('09:00–10:00')")
    assert int(page.evaluate("document.body.dataset.grids")) == len(RELEASED)
    assert page.errors() == [], "the map page logged errors"


def test_map_draws_tiles_only_from_a_configured_tile_server(
    app: FastAPI, live_url: str, page: Page
) -> None:
    city = make_city(live_url)
    open_map(page, live_url, city, city.releases[1])
    assert page.evaluate("document.querySelectorAll('#map image').length") == 0
    template = f"{live_url}/static/favicon.svg?z={{z}}&x={{x}}&y={{y}}"
    app.state.settings = app.state.settings.model_copy(update={"map_tile_url": template})
    served = httpx.get(f"{live_url}/map", trust_env=False)
    assert f"img-src 'self' data: {live_url};" in served.headers["content-security-policy"]
    assert "connect-src 'self';" in served.headers["content-security-policy"]
    assert 'name="dpgate-tile-url"' in served.text
    page.navigate("about:blank")  # a new page load, not only a new fragment
    open_map(page, live_url, city, city.releases[1])
    tiles = page.evaluate(
        "[...document.querySelectorAll('#map .tiles image')].map(i => i.getAttribute('href'))"
    )
    assert tiles and all(t.startswith(f"{live_url}/static/favicon.svg?z=") for t in tiles)
    requested = [u for u in page.requested_urls() if "favicon.svg?z=" in u]
    assert set(tiles) <= set(requested), "the tiles were not asked for"
    page.navigate("about:blank")  # no tile load outlives the test


def test_map_says_why_a_release_cannot_be_drawn(page: Page, live_url: str) -> None:
    page.navigate(f"{live_url}/map#release=nope&key=not-a-key")
    page.wait_for("document.body.dataset.state === 'error'", what="the map's error message")
    status = page.evaluate("document.getElementById('status').textContent")
    assert "401" in status and "unauthenticated" in status
    assert page.evaluate("document.querySelectorAll('#map path').length") == 0


def test_map_page_is_served_with_a_strict_policy(live_url: str) -> None:
    resp = httpx.get(f"{live_url}/map", trust_env=False)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    csp = resp.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp
    assert "http" not in csp, "the page may load from this server only"
    assert 'id="map"' in resp.text and "dpgate-tile-url" not in resp.text


def test_map_finds_the_released_cell_above_a_footprint_cell(page: Page, live_url: str) -> None:
    """An adaptive release's coarse cell covers the fine footprint cells below it: the
    page's H3 parent (from the index bits) agrees with h3's."""
    page.navigate(f"{live_url}/map")
    fine = [*RELEASED[:3], h3.latlng_to_cell(-33.87, 151.21, 9), h3.get_pentagons(8)[0]]
    pairs = [(c, r) for c in fine for r in range(h3.get_resolution(c) + 1)]
    got = page.evaluate(
        f"import('/static/map/geo.js').then(m => {json.dumps(pairs)}"
        ".map(([c, r]) => m.h3Parent(c, r)))",
        await_promise=True,
    )
    assert got == [h3.cell_to_parent(c, r) for c, r in pairs]
    coarse = h3.cell_to_parent(RELEASED[0], 6)
    covering = page.evaluate(
        f"import('/static/map/geo.js').then(m => [m.coveringCell({RELEASED[0]!r},"
        f" new Set([{coarse!r}]), [8, 7, 6]), m.coveringCell({SKIPPED[0]!r},"
        f" new Set([{RELEASED[1]!r}]), [8])])",
        await_promise=True,
    )
    assert covering == [coarse, None]


def test_map_draws_an_adaptive_day_release_slot_by_slot(
    page: Page, live_url: str, tmp_path: Path
) -> None:
    """One release of three hours with an adaptive partition: each hour's cells (coarser
    ones where traffic is thin) are drawn, and ◀ ▶ step through the release's own slots."""
    city = make_city(live_url)
    with city.client(live_url) as api:
        made = api.post(
            f"/datasets/{city.dataset_id}/releases",
            json={
                "slot_start": HOURS[0].isoformat(),
                "slots": 3,
                "partition": "adaptive",
                "coarsest_resolution": 6,
                "max_user_cost": 1.2,  # the hourly releases left each bus 1.33
                "statistics": ["mean"],
            },
        )
        assert made.status_code == 200, made.text
        release = made.json()
    assert release["slots"] == 3 and release["partition"] == "adaptive"
    by_slot: dict[str, set[str]] = {}
    for g in release["grids"]:
        by_slot.setdefault(g["slot_start"], set()).add(g["grid_id"])
    assert len(by_slot) == 3
    resolutions = {g["h3_resolution"] for g in release["grids"]}
    assert len(resolutions) >= 2 and resolutions <= {6, 7, 8}, resolutions

    open_map(page, live_url, city, release["release_id"])
    page.screenshot(tmp_path / "map-adaptive.png", full_page=True)
    for step, slot in enumerate(sorted(by_slot, key=lambda s: s)):
        if step:
            page.evaluate("document.getElementById('next-slot').click()")
            page.wait_for(
                f"document.getElementById('facts').textContent.includes('{slot[11:16]}–')",
                what=f"the slot {slot}",
            )
            wait_drawn(page, release["release_id"])
        drawn = page.evaluate(
            "[...document.querySelectorAll('#map path.cell')].map(e => e.dataset.gridId)"
        )
        assert set(drawn) == by_slot[slot], slot
        assert "(one of 3)" in text_of(page, "#facts")
    page.screenshot(tmp_path / "map-adaptive-last.png", full_page=True)
    assert page.errors() == [], "the map page logged errors"
