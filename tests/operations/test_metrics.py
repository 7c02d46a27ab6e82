"""``GET /metrics``: Prometheus text that moves with traffic, readable only as configured."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from tests.conftest import ADMIN_KEY
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, load, make_dataset
from tests.operations.conftest import METRICS_TOKEN, make_settings

GRID_A = {f"a{i}": [float(i % 9 + 1)] * (1 + i % 3) for i in range(12)}
GRID_B = {"b1": [5.0, 5.0], "b2": [1.0, 2.0, 3.0], "b3": [4.0]}
MEAN_ROUTE = "/grids/{grid_id}/mean"


def scrape(client: TestClient) -> dict[tuple[str, frozenset], float]:
    """Every sample of ``/metrics``, parsed by prometheus_client's own text parser."""
    resp = client.get("/metrics")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_move_with_queries_refusals_and_releases(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client)  # budget 1.0 per user
    grid_a = load(pg_client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})[CELL_A]
    before = scrape(pg_client)

    q = {"epsilon": 0.25, "mechanism": "baseline"}
    assert pg_client.get(f"/grids/{grid_a}/mean", params=q).status_code == 200
    assert pg_client.get(f"/grids/{grid_a}/mean", params=q).json()["cached"] is True
    refused = pg_client.get(f"/grids/{grid_a}/mean", params={**q, "epsilon": 0.9})
    assert refused.status_code == 403
    release = pg_client.post(
        f"/datasets/{ds}/releases",
        json={"slot_start": HOUR.isoformat(), "epsilon": 0.5, "min_users": 1},
    )
    assert release.status_code == 200, release.text
    n_grids = len(release.json()["grids"])
    after = scrape(pg_client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    ok = {"method": "GET", "route": MEAN_ROUTE}
    assert moved("dpgate_http_requests_total", **ok, status="200") == 2
    assert moved("dpgate_http_requests_total", **ok, status="403") == 1
    assert moved("dpgate_http_request_duration_seconds_count", **ok) == 3
    assert moved("dpgate_http_request_duration_seconds_sum", **ok) > 0
    fresh = {"statistic": "mean", "mechanism": "baseline"}
    assert moved("dpgate_answers_total", **fresh, cached="false") == 1
    assert moved("dpgate_answers_total", **fresh, cached="true") == 1
    assert moved("dpgate_budget_refusals_total", route=MEAN_ROUTE) == 1
    assert moved("dpgate_epsilon_charged_total", dataset=str(ds), kind="query") == pytest.approx(
        0.25
    )
    assert moved("dpgate_epsilon_charged_total", dataset=str(ds), kind="release") == pytest.approx(
        0.5 * n_grids
    )
    assert moved("dpgate_releases_total", partition="fixed", cached="false") == 1
    assert moved("dpgate_release_duration_seconds_count") == 1
    posted = {"method": "POST", "route": "/datasets/{dataset_id}/releases", "status": "200"}
    assert moved("dpgate_http_requests_total", **posted) == 1
    # the pools of this process, read when scraped
    assert value(after, "dpgate_db_pool_size", pool="query") == 10
    assert value(after, "dpgate_db_pool_in_use", pool="query") >= 0


def test_users_at_cap_and_database_up(pg_client: TestClient) -> None:
    ds = make_dataset(pg_client)  # budget 1.0 per user
    grid_b = load(pg_client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})[CELL_B]
    assert value(scrape(pg_client), "dpgate_users_at_cap", dataset=str(ds)) == 0
    full = {"epsilon": 1.0, "mechanism": "baseline"}  # the whole budget of grid B's users
    assert pg_client.get(f"/grids/{grid_b}/mean", params=full).status_code == 200
    after = scrape(pg_client)
    assert value(after, "dpgate_users_at_cap", dataset=str(ds)) == len(GRID_B) == 3
    assert pg_client.get(f"/datasets/{ds}/budget").json()["users_at_cap"] == 3
    assert value(after, "dpgate_database_up") == 1
    reset = pg_client.post(f"/datasets/{ds}/budget/reset", json={"reason": "metrics test"})
    assert reset.status_code == 200
    assert value(scrape(pg_client), "dpgate_users_at_cap", dataset=str(ds)) == 0  # new epoch


def test_unmatched_paths_share_one_label(pg_client: TestClient) -> None:
    before = scrape(pg_client)
    for path in ("/no/such/path", "/another-one", "/datasets/"):
        assert pg_client.get(path).status_code == 404
    after = scrape(pg_client)
    unmatched = {"method": "GET", "route": "unmatched", "status": "404"}
    assert (
        value(after, "dpgate_http_requests_total", **unmatched)
        - value(before, "dpgate_http_requests_total", **unmatched)
        == 3
    )
    assert not any("/no/such/path" in str(labels) for _, labels in after)


def test_metrics_need_the_token_or_an_admin_key(pg_client: TestClient) -> None:
    analyst = pg_client.post("/keys", json={"name": "a", "role": "analyst"}).json()["key"]
    pg_client.headers.pop("Authorization")
    assert pg_client.get("/metrics").status_code == 401
    bearer = lambda key: {"Authorization": f"Bearer {key}"}  # noqa: E731
    assert pg_client.get("/metrics", headers=bearer(analyst)).status_code == 403
    assert pg_client.get("/metrics", headers=bearer(METRICS_TOKEN + "x")).status_code == 401
    assert pg_client.get("/metrics", headers=bearer(METRICS_TOKEN)).status_code == 200
    assert pg_client.get("/metrics", headers=bearer(ADMIN_KEY)).status_code == 200
    # the scraper's token reads the metrics and nothing else
    assert pg_client.get("/datasets", headers=bearer(METRICS_TOKEN)).status_code == 401


@pytest.mark.parametrize(("access", "status"), [("public", 200), ("off", 404)])
def test_metrics_public_or_off(
    migrated_postgres_url: str, tmp_path: Path, access: str, status: int
) -> None:
    settings = make_settings(migrated_postgres_url, tmp_path, metrics=access)
    with TestClient(create_app(settings)) as client:
        resp = client.get("/metrics")  # no key at all
        assert resp.status_code == status, resp.text
        if status == 404:
            assert resp.json()["error"]["code"] == "not_found"
