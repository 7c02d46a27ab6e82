"""``/map`` draws a real stored release in a real browser with no network."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import h3
import httpx

from tests.browser.cdp import Page
from tests.conftest import ADMIN_KEY
from tests.helpers import DATASET_DEFAULTS

SLOT = datetime(2024, 3, 5, 8, 0, tzinfo=UTC)
CENTRE = h3.latlng_to_cell(30.2672, -97.7431, 8)  # downtown Austin
CELLS = sorted(h3.grid_disk(CENTRE, 2))  # 19 res-8 hexagons
SHIFTS = (0, 5, 11, 16)  # each user visits four cells; every cell gets 12 users
N_USERS = 3 * len(CELLS)


def city_csv() -> str:
    """Speeds that fall with the distance from the centre, so the colours vary."""
    lines = ["user_id,timestamp,lat,lon,value"]
    for user in range(N_USERS):
        for k, shift in enumerate(SHIFTS):
            cell = CELLS[(user + shift) % len(CELLS)]
            lat, lon = h3.cell_to_latlng(cell)
            speed = 25.0 - 8.0 * h3.grid_distance(CENTRE, cell) + (user % 5)
            for i in range(3):
                ts = SLOT + timedelta(minutes=12 * k + i, seconds=user % 60)
                lines.append(f"bus{user},{ts.isoformat()},{lat},{lon},{speed}")
    return "\n".join(lines) + "\n"


def stored_release(base_url: str) -> tuple[str, str]:
    """An analyst key and the id of a release of the slot, made through the API."""
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, trust_env=False
    ) as admin:
        dataset = admin.post("/datasets", json={**DATASET_DEFAULTS, "value_bound": 30.0})
        assert dataset.status_code == 201, dataset.text
        ds = dataset.json()["id"]
        upload = admin.post(
            f"/datasets/{ds}/records",
            content=city_csv(),
            headers={"content-type": "text/csv"},
        )
        assert upload.status_code == 200 and upload.json()["rejected"] == 0, upload.text
        key = admin.post("/keys", json={"name": "map", "role": "analyst", "epsilon_quota": None})
        assert key.status_code == 201, key.text
        analyst_key = key.json()["key"]
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {analyst_key}"}, trust_env=False
    ) as analyst:
        release = analyst.post(
            f"/datasets/{ds}/releases",
            json={"slot_start": SLOT.isoformat(), "epsilon": 1.0, "clip_user": True},
        )
        assert release.status_code == 200, release.text
    return analyst_key, release.json()["release_id"]


def geojson(base_url: str, key: str, release_id: str) -> dict:
    resp = httpx.get(
        f"{base_url}/releases/{release_id}",
        params={"format": "geojson"},
        headers={"Authorization": f"Bearer {key}"},
        trust_env=False,
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/geo+json"
    return resp.json()


def test_map_draws_one_hexagon_per_released_grid(
    page: Page, live_url: str, tmp_path: Path
) -> None:
    key, release_id = stored_release(live_url)
    features = geojson(live_url, key, release_id)["features"]
    assert {f["properties"]["h3_cell"] for f in features} == set(CELLS)

    page.navigate(f"{live_url}/map#release={quote(release_id)}&key={quote(key)}")
    state = page.wait_for(
        "['drawn', 'error'].includes(document.body.dataset.state) && document.body.dataset.state",
        what="the map to draw the release",
    )
    status = page.evaluate("document.getElementById('status').textContent")
    assert state == "drawn", f"the map did not draw: {status}"
    shot = page.screenshot(tmp_path / "map.png", full_page=True)

    hexagons = page.evaluate(
        "[...document.querySelectorAll('#map path.hex')].map(p => "
        "[p.dataset.gridId, p.getAttribute('fill'), p.getBBox().width, p.getBBox().height])"
    )
    assert len(hexagons) == len(features), f"{len(hexagons)} hexagons for {len(features)} grids"
    assert {h[0] for h in hexagons} == {f["properties"]["grid_id"] for f in features}
    assert all(h[2] > 10 and h[3] > 10 for h in hexagons), "hexagons drawn too small to see"
    # Coloured by the mean: as many distinct fills as distinct means (all means are set).
    means = {f["properties"]["grid_id"]: f["properties"]["mean"] for f in features}
    assert all(m is not None for m in means.values())
    assert len({h[1] for h in hexagons}) >= min(len(set(means.values())), 5)
    assert page.evaluate("document.querySelectorAll('#legend stop').length") >= 2
    assert f"{len(features)} grids drawn" in status
    # The key leaves the address bar once read; the release id stays.
    assert page.evaluate("location.hash") == f"#release={release_id}"

    # Hover the first hexagon: its mean, interval and users appear.
    first = features[0]["properties"]
    hexagon = f"document.querySelector('#map path[data-grid-id=\"{first['grid_id']}\"]')"
    box = page.evaluate(
        f"(() => {{ const r = {hexagon}.getBoundingClientRect();"
        " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
    )
    page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box[0], "y": box[1]})
    page.wait_for("!document.getElementById('tooltip').hidden", what="the hover details")
    tip = page.evaluate("document.getElementById('tooltip').textContent")
    assert first["grid_id"] in tip and f"users {first['n_users']}" in tip
    assert f"mean {first['mean']:.2f}" in tip
    ci = first["mean_ci95"]
    assert (f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "interval none") in tip
    page.screenshot(tmp_path / "map-hover.png")

    outside = [u for u in page.requested_urls() if not u.startswith(live_url + "/")]
    assert not outside, f"the map asked for something the server does not serve: {outside}"
    assert page.errors() == [], "the map page logged errors"
    assert shot.stat().st_size > 20_000, "the screenshot looks blank"


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
    assert 'id="map"' in resp.text
