"""A small city for the map's browser tests, made through the public API.

A dense centre (7 res-8 cells, 40 users each), a ring of 12 cells with 12 users, and an
outer ring of 18 cells with 3 users (below ``min_users``: "too few buses"); speeds fall
with the distance from the centre. Three hours, each released once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import h3
import httpx

from tests.conftest import ADMIN_KEY
from tests.helpers import DATASET_DEFAULTS

DAY = datetime(2024, 3, 5, tzinfo=UTC)
HOURS = [DAY + timedelta(hours=h) for h in (7, 8, 9)]
CENTRE = h3.latlng_to_cell(30.2672, -97.7431, 8)  # downtown Austin
USERS_AT_DISTANCE = {0: 40, 1: 40, 2: 12, 3: 3}
CELLS = sorted(h3.grid_disk(CENTRE, 3))
RELEASED = sorted(c for c in CELLS if h3.grid_distance(CENTRE, c) <= 2)
SKIPPED = sorted(set(CELLS) - set(RELEASED))
EPSILON = 2.888888888888  # a per-grid epsilon people should read as 2.9
VALUE_BOUND = 30.0


def city_csv(hours: list[datetime] = HOURS) -> str:
    lines = ["user_id,timestamp,lat,lon,value"]
    for hour in hours:
        for c, cell in enumerate(CELLS):
            lat, lon = h3.cell_to_latlng(cell)
            d = h3.grid_distance(CENTRE, cell)
            for u in range(USERS_AT_DISTANCE[d]):
                speed = 24.0 - 5.0 * d + (u % 5) - hour.hour % 3
                for i in range(3):
                    ts = hour + timedelta(minutes=15 * i, seconds=u)
                    lines.append(f"bus{c}-{u},{ts.isoformat()},{lat},{lon},{speed}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class City:
    dataset_id: int
    key: str
    releases: list[str]  # one per hour of HOURS, in that order

    def client(self, base_url: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.Client(base_url=base_url, headers=headers, trust_env=False)


def admin_client(base_url: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    return httpx.Client(base_url=base_url, headers=headers, trust_env=False, timeout=60)


def make_dataset(base_url: str, hours: list[datetime] = HOURS, **fields: object) -> int:
    """The city's dataset (values in m/s), its records at ``hours``; its id."""
    with admin_client(base_url) as admin:
        body = {**DATASET_DEFAULTS, "name": "Austin buses", "value_bound": VALUE_BOUND,
                "value_unit": "m/s", **fields}  # fmt: skip
        dataset = admin.post("/datasets", json=body)
        assert dataset.status_code == 201, dataset.text
        ds = dataset.json()["id"]
        upload = admin.post(
            f"/datasets/{ds}/records", content=city_csv(hours), headers={"content-type": "text/csv"}
        )
        assert upload.status_code == 200 and upload.json()["rejected"] == 0, upload.text
    return int(ds)


def make_city(base_url: str) -> City:
    """The dataset, an analyst key and one release per hour (08:00 made last)."""
    ds = make_dataset(base_url)
    with admin_client(base_url) as admin:
        key = admin.post("/keys", json={"name": "map", "role": "analyst", "epsilon_quota": None})
        assert key.status_code == 201, key.text
    city = City(ds, key.json()["key"], [])
    made = {}
    with city.client(base_url) as analyst:
        for hour in (HOURS[0], HOURS[2], HOURS[1]):
            body = {
                "slot_start": hour.isoformat(),
                "epsilon": EPSILON,
                "statistics": ["mean"],
                # 07:00 and 08:00 with the narrowest honest intervals (sure cells); 09:00
                # the most accurate (wide or no intervals): the map shows both kinds.
                "objective": "accuracy" if hour == HOURS[2] else "interval",
            }
            release = analyst.post(f"/datasets/{ds}/releases", json=body)
            assert release.status_code == 200, release.text
            made[hour] = release.json()["release_id"]
    return City(ds, city.key, [made[h] for h in HOURS])
