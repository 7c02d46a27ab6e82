"""Public releases: publishing, reading without a key in every format, caching, the
public listing, units in every export, and the viewer role."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import ADMIN_KEY
from tests.helpers import auth, create_key
from tests.integration.grid_fixtures import CELL_A, CELL_B, GRID_A, GRID_B, HOUR, load, make_dataset
from tests.live_server import ThreadedServer

FORMATS = ("json", "geojson", "csv", "datapackage")


def released(client: TestClient, unit: str | None = "km/h", **body: Any) -> tuple[int, str]:
    """A dataset (values in ``unit``) with two grids and one release of its hour."""
    ds = make_dataset(client, value_unit=unit)
    load(client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})
    made = client.post(
        f"/datasets/{ds}/releases",
        json={"slot_start": HOUR.isoformat(), "epsilon": 0.5, "min_users": 2, **body},
    )
    assert made.status_code == 200, made.text
    return ds, made.json()["release_id"]


def publish(client: TestClient, release_id: str, public: bool = True) -> dict[str, Any]:
    resp = client.patch(f"/releases/{release_id}", json={"public": public})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_publishing_opens_every_format_to_readers_without_a_key(client: TestClient) -> None:
    ds, rid = released(client)
    anonymous = TestClient(client.app)
    ledger = client.get(f"/datasets/{ds}/ledger").json()
    before = {f: client.get(f"/releases/{rid}", params={"format": f}).content for f in FORMATS}
    missing = anonymous.get("/releases/0123456789abcdef0123456789abcdef")
    private = anonymous.get(f"/releases/{rid}")
    assert private.status_code == missing.status_code == 401
    assert private.json() == missing.json()  # existing or not, the same answer

    answer = publish(client, rid)
    assert answer["release_id"] == rid and answer["public"] is True
    assert answer["links"]["csv"].endswith(f"/releases/{rid}?format=csv")
    assert answer["links"]["map"].endswith(f"/map#release={rid}")
    for fmt in FORMATS:
        resp = anonymous.get(f"/releases/{rid}", params={"format": fmt})
        assert resp.status_code == 200, (fmt, resp.text)
        assert resp.content == before[fmt], f"publishing changed the {fmt} body"
        assert resp.headers["cache-control"] == "public, no-cache"
        again = anonymous.get(
            f"/releases/{rid}",
            params={"format": fmt},
            headers={"If-None-Match": resp.headers["etag"]},
        )
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == resp.headers["etag"]
    etags = {
        anonymous.get(f"/releases/{rid}", params={"format": f}).headers["etag"] for f in FORMATS
    }
    assert len(etags) == len(FORMATS)
    # JSON goes as stored zstd frames to a client that takes them, the same once decoded
    plain = anonymous.get(f"/releases/{rid}", headers={"Accept-Encoding": "identity"})
    packed = anonymous.get(f"/releases/{rid}", headers={"Accept-Encoding": "gzip, zstd"})
    assert packed.headers["content-encoding"] == "zstd" and "content-encoding" not in plain.headers
    assert packed.content == plain.content == before["json"]
    assert packed.headers["etag"] != plain.headers["etag"]
    # publishing spent nothing: the ledger is as it was
    assert client.get(f"/datasets/{ds}/ledger").json() == ledger
    # a key that is sent must be a valid one, public release or not
    assert anonymous.get(f"/releases/{rid}", headers=auth("dpg_nope")).status_code == 401

    publish(client, rid, public=False)
    closed = anonymous.get(f"/releases/{rid}")
    assert closed.status_code == 401 and closed.json() == missing.json()
    revalidated = anonymous.get(f"/releases/{rid}", headers={"If-None-Match": "*"})
    assert revalidated.status_code == 401, "a cache revalidating must learn it is closed"
    keyed = client.get(f"/releases/{rid}")
    assert keyed.status_code == 200 and keyed.headers["cache-control"] == "private, no-cache"


def test_only_admins_publish_and_bad_bodies_change_nothing(client: TestClient) -> None:
    _, rid = released(client)
    for role in ("analyst", "viewer"):
        resp = client.patch(
            f"/releases/{rid}", json={"public": True}, headers=auth(create_key(client, role))
        )
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "forbidden"
    for body in ({}, {"public": "true"}, {"public": 1}, {"public": True, "extra": 1}):
        resp = client.patch(f"/releases/{rid}", json=body)
        assert resp.status_code in (400, 422), body
        assert resp.json()["error"]["code"] == "invalid_request"
    assert client.patch("/releases/nope", json={"public": True}).status_code == 404
    assert client.get("/public/releases").json()["releases"] == []


def test_the_public_listing_is_newest_first_with_dataset_and_unit(client: TestClient) -> None:
    ds, first = released(client)
    _, second = released(client, unit=None)
    private_ds, private = released(client)
    publish(client, first)
    publish(client, second)
    anonymous = TestClient(client.app)
    listed = anonymous.get("/public/releases")
    assert listed.status_code == 200, listed.text
    rows = listed.json()["releases"]
    assert [r["release_id"] for r in rows] == [second, first]
    assert private not in listed.text
    row = rows[1]
    assert row["dataset"] == ds and row["value_unit"] == "km/h"
    assert row["privacy_unit"] == "user" and row["n_grids"] == 2
    assert row["max_user_cost"] == pytest.approx(1.0) and row["epsilon"] == pytest.approx(0.5)
    assert row["coverage"]["records"] > 0 and row["links"]["csv"].endswith("format=csv")
    assert rows[0]["value_unit"] is None
    one = anonymous.get("/public/releases", params={"dataset": ds}).json()
    assert [r["release_id"] for r in one["releases"]] == [first] and one["next"] is None
    page = anonymous.get("/public/releases", params={"limit": 1}).json()
    assert [r["release_id"] for r in page["releases"]] == [second] and page["next"] == 1
    page = anonymous.get("/public/releases", params={"limit": 1, "offset": 1}).json()
    assert [r["release_id"] for r in page["releases"]] == [first] and page["next"] is None
    assert anonymous.get("/public/releases", params={"bogus": 1}).status_code == 400
    assert anonymous.get("/public/releases", params={"dataset": private_ds}).json() == {
        "releases": [],
        "next": None,
    }


def test_every_export_says_its_unit(client: TestClient) -> None:
    ds, rid = released(client)
    release = client.get(f"/releases/{rid}").json()
    answers = [g[s] for g in release["grids"] for s in ("mean", "variance")]
    assert answers and all(a["unit"] == "km/h" for a in answers)
    geo = client.get(f"/releases/{rid}", params={"format": "geojson"}).json()
    assert {f["properties"]["unit"] for f in geo["features"]} == {"km/h"}
    rows = list(csv.DictReader(io.StringIO(client.get(f"/releases/{rid}?format=csv").text)))
    assert rows and {r["unit"] for r in rows} == {"km/h"}
    assert float(rows[0]["mean"]) == release["grids"][0]["mean"]["estimate"]
    assert client.get(f"/datasets/{ds}").json()["value_unit"] == "km/h"
    fresh = make_dataset(client, value_unit="m/s")  # its users have budget left
    grid = load(client, fresh, {CELL_A: GRID_A})[CELL_A]
    for cached in (False, True):
        answer = client.get(f"/grids/{grid}/mean", params={"epsilon": 0.1}).json()
        assert answer["unit"] == "m/s" and answer["cached"] is cached


def test_a_bad_unit_is_refused(client: TestClient) -> None:
    for unit in ("", "m/s\nx", "x" * 41, 5):
        resp = client.post(
            "/datasets",
            json={"name": "u", "value_bound": 1, "budget_per_user": 1, "value_unit": unit},
        )
        assert resp.status_code in (400, 422), unit


def test_the_data_package_names_unit_privacy_unit_and_cost(client: TestClient) -> None:
    _, rid = released(client, max_user_cost=0.8, epsilon=None)
    package = client.get(f"/releases/{rid}", params={"format": "datapackage"}).json()
    (resource,) = package["resources"]
    assert resource["path"] == f"http://testserver/releases/{rid}?format=csv"
    fields = {f["name"]: f for f in resource["schema"]["fields"]}
    header = client.get(f"/releases/{rid}?format=csv").text.splitlines()[0].split(",")
    assert list(fields) == header
    assert fields["mean"]["unit"] == "km/h" and fields["variance"]["unit"] == "(km/h)²"
    assert all(f["description"] and f["type"] for f in fields.values())
    terms = package["privacy"]
    assert terms["privacy_unit"] == "user" and terms["max_user_cost"] == pytest.approx(0.8)
    assert terms["ci95"]["level"] == 0.95 and "95%" in terms["ci95"]["meaning"]
    assert terms["mechanism"] == "auto" and terms["coverage"]["records"] > 0


def test_a_viewer_reads_everything_and_never_spends(client: TestClient) -> None:
    ds, rid = released(client)
    viewer = auth(create_key(client, "viewer"))
    grid = client.get(f"/datasets/{ds}/grids").json()["grids"][0]["grid_id"]
    ledger = client.get(f"/datasets/{ds}/ledger").json()
    for url in (
        "/datasets", f"/datasets/{ds}", f"/datasets/{ds}/grids", f"/datasets/{ds}/budget",
        f"/datasets/{ds}/releases", f"/releases/{rid}", f"/releases/{rid}?format=csv", "/keys/me",
    ):  # fmt: skip
        assert client.get(url, headers=viewer).status_code == 200, url
    release = {"slot_start": HOUR.isoformat(), "epsilon": 0.5}
    refused = [
        client.get(f"/grids/{grid}/mean", params={"epsilon": 0.1}, headers=viewer),
        client.get(f"/grids/{grid}/variance", params={"epsilon": 0.1}, headers=viewer),
        client.get(f"/grids/{grid}/quote", params={"target_error": 1}, headers=viewer),
        client.post(f"/datasets/{ds}/releases", json=release, headers=viewer),
        client.post(f"/datasets/{ds}/releases/preview", json=release, headers=viewer),
        client.get(f"/datasets/{ds}/ledger", headers=viewer),
        client.post("/keys", json={"name": "x", "role": "viewer"}, headers=viewer),
    ]
    for resp in refused:
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "forbidden", resp.text
    assert client.get(f"/datasets/{ds}/ledger").json() == ledger
    quota = client.post("/keys", json={"name": "v", "role": "viewer", "epsilon_quota": 1})
    assert quota.status_code in (400, 422) and "never spends" in quota.text
    assert ADMIN_KEY not in client.get("/keys").text


def test_the_data_package_is_valid_and_its_csv_matches_it(app) -> None:
    """Frictionless reads the package over HTTP, fetches the CSV it names and checks every
    row against the Table Schema (types, primary key, header)."""
    frictionless = pytest.importorskip("frictionless", reason="the dev extra brings it")
    with (
        ThreadedServer(app) as server,
        httpx.Client(base_url=server.url, headers=auth(ADMIN_KEY), trust_env=False) as client,
    ):
        _, rid = released(client)  # type: ignore[arg-type]
        publish(client, rid)  # type: ignore[arg-type]
        url = f"{server.url}/releases/{rid}?format=datapackage"
        descriptor = httpx.get(url, trust_env=False).json()
        report = frictionless.validate(descriptor)
        assert report.valid, report.flatten(["rowNumber", "fieldName", "type", "note"])
        package = frictionless.Package(descriptor)
        rows = package.get_resource("grids").read_rows()
        assert len(rows) == 2 and {r["unit"] for r in rows} == {"km/h"}


def test_the_catalogue_lists_each_public_release_with_its_links(client: TestClient) -> None:
    anonymous = TestClient(client.app)
    empty = anonymous.get("/")
    assert empty.status_code == 200 and "No release is public yet" in empty.text
    assert "default-src 'self'" in empty.headers["content-security-policy"]
    _, rid = released(client)
    _, private = released(client)
    publish(client, rid)
    page = anonymous.get("/").text
    assert f"/releases/{rid}?format=csv" in page and f"/map#release={rid}" in page
    assert f"/releases/{rid}?format=datapackage" in page and private not in page
    assert "Tue 2024-03-05, 10:00–11:00 (UTC+00:00)" in page
    assert "mean, variance (km/h)" in page and "at most 1 per user" in page
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs and all(h.startswith(("/", "http://testserver/")) for h in hrefs), hrefs
    assert "<script" not in page
