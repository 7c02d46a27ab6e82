"""Datasets and grid listing over HTTP."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.helpers import auth, create_dataset, create_key, make_csv, post_csv, upload_csv


def _error(resp, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def test_create_with_defaults_list_and_get(client: TestClient) -> None:
    resp = client.post("/datasets", json={"name": "itms", "value_bound": 65, "budget_per_user": 5})
    assert resp.status_code == 201, resp.text
    made = resp.json()
    assert made["h3_resolution"] == 8 and made["timeslot_minutes"] == 60
    assert made["timezone"] == "UTC" and made["max_epsilon_per_query"] == 10.0
    assert made["on_exhausted"] == "refuse" and made["epoch"] == 1
    assert made["value_bound"] == 65.0 and made["budget_per_user"] == 5.0
    other = create_dataset(
        client, name="austin", timezone="America/Chicago", on_exhausted="exclude"
    )

    analyst = auth(create_key(client, "analyst"))
    listed = client.get("/datasets", headers=analyst)
    assert listed.status_code == 200
    assert [d["id"] for d in listed.json()["datasets"]] == [made["id"], other["id"]]
    assert listed.json()["datasets"][1]["timezone"] == "America/Chicago"

    one = client.get(f"/datasets/{other['id']}", headers=analyst).json()
    assert one["on_exhausted"] == "exclude"
    assert (one["n_users"], one["n_grids"], one["n_records"]) == (0, 0, 0)


BAD_FIELDS = [
    {"value_bound": 0},
    {"value_bound": -1},
    {"value_bound": "NaN"},
    {"value_bound": "Infinity"},
    {"h3_resolution": 16},
    {"h3_resolution": -1},
    {"timeslot_minutes": 7},
    {"timeslot_minutes": 0},
    {"timeslot_minutes": 2880},
    {"timezone": "Mars/Olympus"},
    {"timezone": "localtime"},
    {"budget_per_user": 0},
    {"budget_per_user": "inf"},
    {"max_epsilon_per_query": -0.5},
    {"max_epsilon_per_query": "nan"},
    {"on_exhausted": "ignore"},
    {"name": ""},
    {"surprise": 1},
]


def test_create_validates_every_field(client: TestClient) -> None:
    for patch in BAD_FIELDS:
        body = {"name": "x", "value_bound": 65, "budget_per_user": 1, **patch}
        _error(client.post("/datasets", json=body), 400, "invalid_request")
    assert client.get("/datasets").json()["datasets"] == []


def test_non_finite_json_numbers_are_refused(client: TestClient) -> None:
    raw = b'{"name": "x", "value_bound": NaN, "budget_per_user": 1}'
    resp = client.post("/datasets", content=raw, headers={"content-type": "application/json"})
    _error(resp, 400, "invalid_request")
    raw = b'{"name": "x", "value_bound": 1e999, "budget_per_user": 1}'
    resp = client.post("/datasets", content=raw, headers={"content-type": "application/json"})
    _error(resp, 400, "invalid_request")


def test_roles_and_unknown_datasets(client: TestClient) -> None:
    analyst = auth(create_key(client, "analyst"))
    _error(
        client.post(
            "/datasets", json={"name": "x", "value_bound": 1, "budget_per_user": 1}, headers=analyst
        ),
        403,
        "forbidden",
    )
    _error(
        client.get("/datasets", headers={"Authorization": "Bearer nope"}), 401, "unauthenticated"
    )
    ds = create_dataset(client)
    _error(post_csv(client, ds["id"], make_csv([]), headers=analyst), 403, "forbidden")
    for bad in ("999999", "0", "-3", "abc", "99999999999999999999999", "1.5"):
        _error(client.get(f"/datasets/{bad}"), 404, "not_found")
        _error(client.get(f"/datasets/{bad}/grids"), 404, "not_found")
        _error(
            post_csv(client, bad, make_csv([("u", "2016-01-01T00:00:00Z", 0, 0, 1)])),
            404,
            "not_found",
        )


def test_grids_listing_filters_pages_and_local_offsets(client: TestClient) -> None:
    ds = create_dataset(client, timezone="Asia/Kolkata", h3_resolution=7)
    points = [(12.9716, 77.5946), (13.0827, 80.2707), (28.6139, 77.2090)]  # 3 cities
    rows = [
        (f"bus{u}", f"2016-11-25T{h:02d}:{m + i:02d}:00+05:30", lat, lon, 20 + u)
        for u in range(3)
        for h in (9, 10)
        for m in (0, 30)
        for i, (lat, lon) in enumerate(points[: u + 1])
    ]
    upload_csv(client, ds["id"], make_csv(rows))
    analyst = auth(create_key(client, "analyst"))
    page = client.get(f"/datasets/{ds['id']}/grids", headers=analyst).json()
    grids = page["grids"]
    assert "total" not in page and page["next"] is None and len(grids) == 6
    assert [g["slot_start"] for g in grids] == ["2016-11-25T09:00:00+05:30"] * 3 + [
        "2016-11-25T10:00:00+05:30"
    ] * 3
    assert [g["h3_cell"] for g in grids[:3]] == sorted(g["h3_cell"] for g in grids[:3])
    first = next(g for g in grids if g["n_users"] == 3)
    assert (first["n_records"], first["max_user_records"]) == (6, 2)
    assert len({g["grid_id"] for g in grids}) == 6

    # slot filter in any ISO form (UTC, local offset, naive = local), cell filter
    for form in ("2016-11-25T03:30:00Z", "2016-11-25T09:00:00+05:30", "2016-11-25T09:00:00"):
        got = client.get(f"/datasets/{ds['id']}/grids", params={"slot_start": form}).json()
        assert [g["grid_id"] for g in got["grids"]] == [g["grid_id"] for g in grids[:3]], form
    cell = first["h3_cell"]
    got = client.get(f"/datasets/{ds['id']}/grids", params={"h3_cell": cell}).json()
    assert len(got["grids"]) == 2 and {g["h3_cell"] for g in got["grids"]} == {cell}

    # pagination: deterministic order, next offset
    p1 = client.get(f"/datasets/{ds['id']}/grids", params={"limit": 4}).json()
    p2 = client.get(f"/datasets/{ds['id']}/grids", params={"limit": 4, "offset": p1["next"]}).json()
    assert p1["next"] == 4 and p2["next"] is None and len(p2["grids"]) == 2
    assert [g["grid_id"] for g in p1["grids"] + p2["grids"]] == [g["grid_id"] for g in grids]

    _error(client.get(f"/datasets/{ds['id']}/grids", params={"limit": 0}), 400, "invalid_request")
    deep = client.get(f"/datasets/{ds['id']}/grids", params={"offset": 10**6 + 1})
    _error(deep, 400, "invalid_request")
    assert "1000000" in deep.text
    far = client.get(f"/datasets/{ds['id']}/grids", params={"offset": 10**6}).json()
    assert far["grids"] == [] and far["next"] is None
    _error(
        client.get(f"/datasets/{ds['id']}/grids", params={"limit": 10001}), 400, "invalid_request"
    )
    _error(
        client.get(f"/datasets/{ds['id']}/grids", params={"slot_start": "soon"}),
        400,
        "invalid_request",
    )


def test_dataset_detail_counts(client: TestClient) -> None:
    ds = create_dataset(client)
    rows = [(f"u{i % 4}", f"2016-11-25T10:{i:02d}:00Z", 12.97, 77.59, i) for i in range(10)]
    upload_csv(client, ds["id"], make_csv(rows))
    one = client.get(f"/datasets/{ds['id']}").json()
    assert (one["n_users"], one["n_grids"], one["n_records"]) == (4, 1, 10)
