"""What refusing unknown query parameters costs a query (issue 17).

Run ``python benchmarks/query_params.py`` (options: ``--repeats N``, ``--calls N``).
Prints the median time of the check alone (``app.http.query_params.CheckedRoute``'s set
difference) on a cached mean
query's request (grid, epsilon, mechanism and three options), and the median time of
that whole cached query through the ASGI app in process (on a fresh Postgres schema),
each over repeated runs, so the check's share of a request is read off directly
(parsing the query string is measured apart: FastAPI parses it once per request for
the endpoint as well).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.requests import Request

from app.config import Settings
from app.db.migrate import upgrade
from app.http.query_params import declared_query_params
from app.main import create_app
from app.queries.endpoints import router as queries_router
from benchmarks.postgres import fresh_database

ADMIN = "dpg_benchmark_admin_key_0123456789"
QUERY = "epsilon=0.5&mechanism=levy&gamma=0.3&m_ub=2&user_mean_fill=true"


def _check_seconds(route: APIRoute, calls: int, *, parse_only: bool = False) -> float:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/grids/g/mean",
        "query_string": QUERY.encode(),
        "headers": [],
        "route": route,
    }

    allowed = declared_query_params(route)

    async def run() -> float:
        started = time.perf_counter()
        for _ in range(calls):
            if parse_only:  # what every request pays anyway (FastAPI reads the same)
                assert Request(scope).query_params
            else:
                # the check CheckedRoute makes (app.http.query_params): one set difference
                assert not set(Request(scope).query_params) - allowed
        return (time.perf_counter() - started) / calls

    return asyncio.run(run())


def _query_seconds(client: TestClient, url: str, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        assert client.get(url).status_code == 200
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url, drop = fresh_database("postgres", Path(tmp))
        upgrade(url)
        settings = Settings(database_url=url, admin_key=ADMIN, secret_key="bench")
        app = create_app(settings)
        route = next(
            r for r in queries_router.routes if isinstance(r, APIRoute) and r.path.endswith("/mean")
        )
        with TestClient(app) as client:
            client.headers["Authorization"] = f"Bearer {ADMIN}"
            ds = client.post(
                "/datasets", json={"name": "b", "value_bound": 10, "budget_per_user": 1e6}
            ).json()["id"]
            rows = "".join(
                f"u{u},2024-03-05T10:00:{r:02d}Z,30.2672,-97.7431,{(u + r) % 10}\n"
                for u in range(30)
                for r in range(1 + u % 4)
            )
            client.post(
                f"/datasets/{ds}/records",
                content="user_id,timestamp,lat,lon,value\n" + rows,
                headers={"content-type": "text/csv"},
            )
            grid = client.get(f"/datasets/{ds}/grids").json()["grids"][0]["grid_id"]
            query_url = f"/grids/{grid}/mean?{QUERY}"
            assert client.get(query_url).status_code == 200  # stored: the rest are cached
            checks = [_check_seconds(route, args.calls) for _ in range(args.repeats)]
            parses = [
                _check_seconds(route, args.calls, parse_only=True) for _ in range(args.repeats)
            ]
            queries = [_query_seconds(client, query_url, args.calls) for _ in range(args.repeats)]
        drop()
    check, query = statistics.median(checks), statistics.median(queries)
    parse = statistics.median(parses)
    print(f"unknown-parameter check: median {check * 1e6:.1f} µs per request")
    print(f"  of which parsing the query string (shared with FastAPI): {parse * 1e6:.1f} µs")
    print(f"cached mean query (in process): median {query * 1e6:.0f} µs per request")
    print(f"the check's share: {100 * check / query:.2f}%")


if __name__ == "__main__":
    main()
