"""``GET /queries``: the calling key's own stored answers, newest first, paginated."""

from __future__ import annotations

from datetime import datetime

import pytest
from fastapi.testclient import TestClient

from tests.integration.grid_fixtures import CELL_A, CELL_B, analyst, load, make_dataset

GRID_A = {"u1": [1.0], "u2": [2.0, 4.0], "u3": [9.0, 9.5, 8.0]}
GRID_B = {"u4": [5.0, 5.0], "u5": [1.0, 2.0, 3.0]}


def _ask(client: TestClient, grid: str, statistic: str, eps: float, hdr: dict) -> dict:
    resp = client.get(f"/grids/{grid}/{statistic}", params={"epsilon": eps}, headers=hdr)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_a_key_lists_its_own_answers_newest_first(client: TestClient) -> None:
    ds = make_dataset(client, timezone="America/Chicago")
    ids = load(client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})
    a, b = ids[CELL_A], ids[CELL_B]
    alice, bob = analyst(client), analyst(client)
    asked = [
        _ask(client, a, "mean", 0.1, alice),
        _ask(client, a, "variance", 0.1, alice),
        _ask(client, b, "mean", 0.2, alice),
    ]
    _ask(client, b, "variance", 0.1, bob)

    page = client.get("/queries", headers=alice).json()
    assert page["total"] == 3 and page["next"] is None
    listed = page["queries"]
    assert [q["query_id"] for q in listed] == [x["query_id"] for x in reversed(asked)]
    for item, answer in zip(listed, reversed(asked), strict=True):
        assert item["answer"] == {**answer, "cached": True}  # exactly as first returned
        assert item["grid_id"] == answer["grid_id"] and item["statistic"] == answer["statistic"]
        assert item["epsilon"] == answer["epsilon"] and item["dataset_id"] == ds
        assert item["reusable"] is True
        moment = datetime.fromisoformat(item["created_at"])
        assert moment.utcoffset() is not None and moment.utcoffset().total_seconds() in (
            -6 * 3600,
            -5 * 3600,
        )  # local time in Chicago, as the grid listing
    # another key sees only its own; the filter by grid
    assert [q["statistic"] for q in client.get("/queries", headers=bob).json()["queries"]] == [
        "variance"
    ]
    only_a = client.get("/queries", params={"grid_id": a}, headers=alice).json()
    assert only_a["total"] == 2 and {q["grid_id"] for q in only_a["queries"]} == {a}

    # pages follow `next`
    seen, offset = [], 0
    while offset is not None:
        resp = client.get("/queries", params={"limit": 2, "offset": offset}, headers=alice)
        seen += [q["query_id"] for q in resp.json()["queries"]]
        offset = resp.json()["next"]
    assert seen == [q["query_id"] for q in listed]

    budget_before = client.get(f"/datasets/{ds}/budget").json()
    client.get("/queries", headers=alice)
    assert client.get(f"/datasets/{ds}/budget").json() == budget_before  # reading is free


def test_a_budget_reset_makes_answers_not_reusable(client: TestClient) -> None:
    ds = make_dataset(client)
    a = load(client, ds, {CELL_A: GRID_A})[CELL_A]
    hdr = analyst(client)
    first = _ask(client, a, "mean", 0.1, hdr)
    again = _ask(client, a, "mean", 0.1, hdr)  # the repeat is the stored answer: not listed twice
    assert again["cached"] is True and again["query_id"] == first["query_id"]
    assert client.get("/queries", headers=hdr).json()["total"] == 1
    resp = client.post(f"/datasets/{ds}/budget/reset", json={"reason": "test"})
    assert resp.status_code == 200, resp.text
    listed = client.get("/queries", headers=hdr).json()["queries"]
    assert [q["reusable"] for q in listed] == [False]


@pytest.mark.parametrize(
    "params", [{"limit": 0}, {"limit": 1001}, {"offset": -1}, {"grid_id": "x" * 33}]
)
def test_bad_listing_parameters_are_refused(shared_client: TestClient, params: dict) -> None:
    resp = shared_client.get("/queries", params=params)
    assert resp.status_code in (400, 422) and resp.json()["error"]["code"] == "invalid_request"


def test_the_listing_needs_a_key(client: TestClient) -> None:
    resp = client.get("/queries", headers={"Authorization": ""})
    assert resp.status_code == 401
