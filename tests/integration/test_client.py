"""``dpgate.Client`` against a live ``dpgate serve``, and against a scripted HTTP server for
retries and the error mapping of answers a healthy server rarely gives."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

import dpgate
from tests.conftest import ADMIN_KEY, new_schema
from tests.integration.grid_fixtures import CELL_A, CELL_B, HOUR, csv_for
from tests.live_server import LiveServer, live_server

# 12 users in cell A (1 to 3 records each), 3 users in cell B.
GRID_A = {f"a{i}": [float(i % 9 + 1)] * (1 + i % 3) for i in range(12)}
GRID_B = {"b1": [5.0, 5.0], "b2": [1.0, 2.0, 3.0], "b3": [4.0]}


@dataclass
class World:
    server: LiveServer
    dataset_id: int
    admin: dpgate.Client
    analyst: dpgate.Client
    analyst_key: str
    paths: set[str] = field(default_factory=set)


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, postgres_base_url: str, postgres_admin: Engine
) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("client")
    with (
        new_schema(postgres_base_url, postgres_admin) as url,
        live_server(url, workdir, workers=1) as server,
    ):
        admin = dpgate.Client(server.url, ADMIN_KEY)
        ds = admin.create_dataset(
            name="client test", value_bound=10.0, budget_per_user=10.0, timezone="UTC"
        )
        result = admin.upload(ds.id, csv_for({CELL_A: GRID_A, CELL_B: GRID_B}))
        assert result.rejected == 0 and result.accepted == sum(
            len(v) for g in (GRID_A, GRID_B) for v in g.values()
        )
        # every user of cell A spends 1 of 10 first, so the tests' refusal of 9.99 holds
        # whichever of them run on this worker, in any order
        busiest = max(admin.grids(ds.id), key=lambda g: g.n_users)
        admin.mean(busiest.grid_id, 1.0, mechanism="baseline")
        key = admin.create_key("client analyst")["key"]
        analyst = dpgate.Client(server.url, key)
        paths = set(httpx.get(f"{server.url}/openapi.json").json()["paths"])
        try:
            yield World(server, ds.id, admin, analyst, key, paths)
        finally:
            admin.close()
            analyst.close()


def _busiest(world: World) -> dpgate.Grid:
    return max(world.analyst.grids(world.dataset_id), key=lambda g: g.n_users)


def test_datasets_and_every_page_of_grids(world: World) -> None:
    names = [d.name for d in world.analyst.datasets()]
    assert names == ["client test"]
    one_page = world.analyst.grids(world.dataset_id)
    paged = world.analyst.grids(world.dataset_id, limit=1)  # one grid a page: `next` followed
    assert len(one_page) == 2 and [g.grid_id for g in paged] == [g.grid_id for g in one_page]
    assert {g.n_users for g in paged} == {12, 3}
    assert all(isinstance(g, dpgate.Grid) and g.slot_start for g in paged)


def test_mean_variance_quote_budget_and_stored_answers(world: World) -> None:
    c = world.analyst
    grid = _busiest(world)
    before = c.budget(world.dataset_id).max_spent
    mean = c.mean(grid.grid_id, 0.1, mechanism="baseline")
    assert isinstance(mean, dpgate.StatisticAnswer) and mean.statistic == "mean"
    assert mean.cached is False and mean.n_users_charged == 12
    again = c.mean(grid.grid_id, 0.1, mechanism="baseline")
    assert again.cached is True and again.estimate == mean.estimate
    levy = c.mean(grid.grid_id, 0.05, mechanism="levy", gamma=0.3, user_mean_fill=False)
    assert levy.mechanism == "levy" and levy.options["gamma"] == 0.3  # extra fields kept
    assert levy.options["user_mean_fill"] is False
    var = c.variance(grid.grid_id, 0.1, mechanism="clip", m=2)
    assert var.statistic == "variance" and var.mechanism == "clip"
    quote = c.quote(grid.grid_id, target_error=2.0)
    assert isinstance(quote, dpgate.Quote) and quote.statistic == "mean"
    budget = c.budget(world.dataset_id)
    assert budget.max_spent - before == pytest.approx(0.25) and budget.budget_per_user == 10.0
    stored = c.queries()
    assert [s.query_id for s in stored] == [var.query_id, levy.query_id, mean.query_id]
    assert stored[-1].answer.estimate == mean.estimate and stored[-1].answer.cached is True
    assert all(s.reusable for s in stored)


def test_user_mean_is_a_statistic_answer_with_its_interval(world: World) -> None:
    c = world.analyst
    grid = _busiest(world)
    answer = c.user_mean(grid.grid_id, 0.1)
    assert isinstance(answer, dpgate.StatisticAnswer) and answer.statistic == "user_mean"
    assert answer.mechanism == "baseline" and answer.ci95 is not None
    assert answer.n_users_charged == 12 and answer.cached is False
    assert c.user_mean(grid.grid_id, 0.1).cached is True


def test_errors_are_typed(world: World) -> None:
    c = world.analyst
    grid = _busiest(world)
    with pytest.raises(dpgate.NotFound) as not_found:
        c.mean("nosuchgrid", 0.1)
    assert not_found.value.status == 404 and not_found.value.code == "not_found"
    with pytest.raises(dpgate.InvalidRequest):
        c.mean(grid.grid_id, -1)
    with pytest.raises(dpgate.InvalidRequest) as unknown:
        c.mean(grid.grid_id, 0.1, mechanism="baseline", gamma=0.5)
    assert "gamma" in unknown.value.message
    with pytest.raises(dpgate.Forbidden):
        c.create_key("not allowed")
    with (
        dpgate.Client(world.server.url, "dpg_wrong") as stranger,
        pytest.raises(dpgate.Unauthenticated),
    ):
        stranger.datasets()
    with pytest.raises(dpgate.BudgetExhausted) as exhausted:  # budget per user is 10
        c.mean(grid.grid_id, 9.99, mechanism="baseline")
    assert exhausted.value.status == 403
    # API.md: the refusal says what is left (servers before that field answer None)
    left = exhausted.value.largest_epsilon
    assert left is None or 0 <= left < 9.99
    assert isinstance(exhausted.value, dpgate.DpgateError)


def test_release_sends_an_idempotency_key(world: World) -> None:
    release = world.analyst.release(world.dataset_id, HOUR.isoformat(), epsilon=0.05)
    assert isinstance(release, dpgate.Release) and release.release_id
    assert {g.grid_id for g in release.grids} <= {g.grid_id for g in _busiest_list(world)}


def _busiest_list(world: World) -> list[dpgate.Grid]:
    return world.analyst.grids(world.dataset_id)


def test_me(world: World) -> None:
    """``GET /keys/me`` (API.md) through the client."""
    me = world.analyst.me()
    assert me.role == "analyst" and me.epsilon_quota is None and me.epsilon_remaining is None
    assert world.admin.me().role == "admin"


def test_release_preview(world: World) -> None:
    """``POST /datasets/{id}/releases/preview`` (API.md) through the client: free."""
    before = world.analyst.budget(world.dataset_id).max_spent
    plan = world.analyst.release_preview(world.dataset_id, HOUR.isoformat(), epsilon=0.05)
    assert isinstance(plan, dpgate.ReleasePreview)
    assert all(g.expected_error is not None for g in plan.grids)
    assert world.analyst.budget(world.dataset_id).max_spent == before  # free
    assert plan.useful is not None and plan.useful.width == 2.0  # U/5


def test_a_profile_release_through_the_client(world: World) -> None:
    """A typical day: its slots stay times of day, and it says its profile and useful share."""
    profile = {"from": "2024-03-04", "to": "2024-03-08", "days": "weekdays"}
    release = world.analyst.release(
        world.dataset_id, "10:00", profile=profile, epsilon=0.05, min_users=3
    )
    assert release.profile is not None and release.profile.n_days == 5
    assert release.useful is not None and isinstance(release.warnings, list)
    assert {g.slot_start for g in release.grids} == {"10:00"}
    listed = world.analyst.releases(world.dataset_id)
    assert any(r.profile is not None for r in listed)
    pytest.importorskip("pandas")
    assert set(release.to_dataframe()["slot_start"]) == {"10:00"}


# ---- a scripted server: retries, idempotency keys, the error mapping ---------------------------


@dataclass
class Scripted:
    """An HTTP server answering ``replies`` (status, headers, body) in turn; ``seen``: requests."""

    url: str
    replies: list[tuple[int, dict[str, str], Any]]
    seen: list[dict[str, Any]]


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    state = Scripted("", [], [])

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.seen.append(
                {"method": self.command, "path": self.path, "headers": dict(self.headers),
                 "body": body}
            )  # fmt: skip
            status, headers, payload = state.replies.pop(0) if state.replies else (500, {}, {})
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _reply  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # shutdown() waits for the serving loop's next poll: 0.01 s, not the default 0.5 s
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


UNAVAILABLE = (503, {"Retry-After": "0"}, {"error": {"code": "unavailable", "message": "busy"}})
RELEASE = {"release_id": "r1", "epsilon": 0.5, "G1": 2, "K": 1, "grids": [], "cached": False}


def test_503_is_retried_with_the_same_idempotency_key(scripted: Scripted) -> None:
    scripted.replies = [UNAVAILABLE, UNAVAILABLE, (200, {}, RELEASE), (200, {}, RELEASE)]
    with dpgate.Client(scripted.url, "k") as c:
        release = c.release(7, "2024-03-05T10:00:00+00:00", epsilon=0.5)
        assert release.release_id == "r1" and release.G1 == 2  # extra fields kept
        c.release(7, "2024-03-05T10:00:00+00:00", epsilon=0.5)
    keys = [r["headers"].get("Idempotency-Key") for r in scripted.seen]
    assert len(keys) == 4 and keys[0] and keys[0] == keys[1] == keys[2] != keys[3]
    assert all(r["path"] == "/datasets/7/releases" for r in scripted.seen)
    assert json.loads(scripted.seen[0]["body"]) == {
        "slot_start": "2024-03-05T10:00:00+00:00",
        "epsilon": 0.5,
    }
    assert scripted.seen[0]["headers"]["Authorization"] == "Bearer k"


def test_uploads_carry_an_idempotency_key(scripted: Scripted, tmp_path: Path) -> None:
    answer = {"accepted": 1, "rejected": 0, "clamped": 0, "duplicates": 0, "errors": []}
    scripted.replies = [UNAVAILABLE, (200, {}, answer)]
    path = tmp_path / "r.csv"
    path.write_text("user_id,timestamp,lat,lon,value\nu,1,2,3,4\n")
    with dpgate.Client(scripted.url, "k") as c:
        assert c.upload(3, path, drop_zero=True).accepted == 1
    first, second = scripted.seen
    assert first["headers"]["Idempotency-Key"] == second["headers"]["Idempotency-Key"]
    assert first["path"] == "/datasets/3/records?drop_zero=true"
    assert first["body"] == path.read_bytes() and first["headers"]["Content-Type"] == "text/csv"


def test_retries_are_bounded(scripted: Scripted) -> None:
    slow = (503, {"Retry-After": "100"}, UNAVAILABLE[2])
    scripted.replies = [slow] * 10
    started = time.monotonic()
    with (
        dpgate.Client(scripted.url, "k", max_retries=2, max_retry_wait=0.05) as c,
        pytest.raises(dpgate.Unavailable),
    ):
        c.budget(1)
    assert len(scripted.seen) == 3 and time.monotonic() - started < 5
    assert "Idempotency-Key" not in scripted.seen[0]["headers"]  # a read carries none


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (400, "invalid_request", dpgate.InvalidRequest),
        (422, "invalid_request", dpgate.InvalidRequest),
        (401, "unauthenticated", dpgate.Unauthenticated),
        (403, "forbidden", dpgate.Forbidden),
        (403, "budget_exhausted", dpgate.BudgetExhausted),
        (404, "not_found", dpgate.NotFound),
        (409, "conflict", dpgate.Conflict),
        (413, "payload_too_large", dpgate.PayloadTooLarge),
        (422, "idempotency_conflict", dpgate.IdempotencyConflict),
        (429, "rate_limited", dpgate.RateLimited),
        (503, "unavailable", dpgate.Unavailable),
    ],
)
def test_error_codes_map_to_exceptions(
    scripted: Scripted, status: int, code: str, error: type[dpgate.DpgateError]
) -> None:
    body = {"error": {"code": code, "message": "m", "largest_epsilon": 0.25}}
    scripted.replies = [(status, {"Retry-After": "0"}, body)]
    with dpgate.Client(scripted.url, "k", max_retries=0) as c, pytest.raises(error) as caught:
        c.me()
    assert caught.value.status == status and caught.value.code == code
    assert caught.value.message == "m"
    if error is dpgate.BudgetExhausted:
        assert caught.value.largest_epsilon == 0.25
    assert scripted.seen[0]["path"] == "/keys/me" and scripted.seen[0]["method"] == "GET"


def test_requests_the_client_sends(scripted: Scripted) -> None:
    me = {"id": 3, "name": "n", "role": "analyst", "epsilon_quota": 2.0, "epsilon_spent": 0.5,
          "epsilon_remaining": 1.5}  # fmt: skip
    preview = {"G1": 1, "K": 1, "epsilon": 0.5, "max_user_cost": 0.5, "skipped_grids": 0,
               "users_over_budget": 0,
               "grids": [{"grid_id": "g", "h3_cell": "c", "slot_start": "s", "n_users": 10,
                          "expected_error": 1.5}]}  # fmt: skip
    page1 = {"queries": [], "total": 0, "limit": 1, "offset": 0, "next": None}
    geojson = {"type": "FeatureCollection", "features": []}
    scripted.replies = [
        (200, {}, me), (200, {}, preview), (200, {}, page1), (200, {}, RELEASE),
        (200, {}, geojson), (404, {}, {"error": {"code": "not_found", "message": "no"}}),
    ]  # fmt: skip
    with dpgate.Client(scripted.url + "/", "k") as c:
        assert c.me().epsilon_remaining == 1.5
        plan = c.release_preview(5, "2024-03-05T10:00:00+00:00", max_user_cost=0.5, min_users=10)
        assert plan.grids[0].expected_error == 1.5 and plan.users_over_budget == 0
        assert c.queries(grid_id="g") == []
        assert c.get_release("r1").release_id == "r1"
        assert json.loads(c.release_file("r1")) == geojson
        with pytest.raises(dpgate.NotFound):
            c.release_file("r2", format="csv")
    sent = scripted.seen
    assert sent[1]["method"] == "POST" and sent[1]["path"] == "/datasets/5/releases/preview"
    assert json.loads(sent[1]["body"]) == {
        "slot_start": "2024-03-05T10:00:00+00:00",
        "max_user_cost": 0.5,
        "min_users": 10,
    }
    assert "Idempotency-Key" not in sent[1]["headers"]  # a preview charges nothing
    assert sent[2]["path"] == "/queries?grid_id=g&offset=0"
    assert [r["path"] for r in sent[3:]] == [
        "/releases/r1", "/releases/r1?format=geojson", "/releases/r2?format=csv"
    ]  # fmt: skip


def test_a_non_json_error_still_maps_by_status(scripted: Scripted) -> None:
    scripted.replies = [(404, {}, "plain")]
    with dpgate.Client(scripted.url, "k") as c, pytest.raises(dpgate.NotFound):
        c.datasets()


def test_the_readme_example_runs(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) == 5
    assert world.dataset_id == 1  # the README's dataset: the first one of a fresh server
    code = code.replace("http://127.0.0.1:8000", world.server.url)
    code = code.replace("dpg_...analyst key...", world.analyst_key)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.split()
    assert len(printed) >= 4 and printed[-2] in {m for m in _mechanisms()}


def _mechanisms() -> set[str]:
    from app.core import MEAN_MECHANISMS

    return set(MEAN_MECHANISMS)


def test_releases_listed_and_read_without_a_key(scripted: Scripted) -> None:
    """Public releases are read without any key: the keyless client sends none."""
    listed = {"release_id": "r1", "slot_start": "2024-03-05T10:00:00+00:00", "slots": 24,
              "partition": "fixed", "epsilon": 0.5, "max_user_cost": 1.0, "n_grids": 3,
              "created_at": "2024-03-06T01:00:00+00:00", "dataset": 5}  # fmt: skip
    scripted.replies = [
        (200, {}, {"releases": [listed], "next": 1}),
        (200, {}, {"releases": [{**listed, "release_id": "r0"}], "next": None}),
        (200, {}, {"releases": [listed], "next": None}),
        (200, {}, RELEASE),
    ]
    with dpgate.Client(scripted.url) as anyone:
        public = anyone.public_releases(dataset_id=5)
        assert [r.release_id for r in public] == ["r1", "r0"] and public[0].n_grids == 3
        assert public[0].dataset == 5 and isinstance(public[0], dpgate.ReleaseSummary)
    with dpgate.Client(scripted.url, "k") as c:
        assert [r.release_id for r in c.releases(5)] == ["r1"]
    with dpgate.Client(scripted.url) as anyone:
        assert anyone.get_release("r1").release_id == "r1"
    paths = [r["path"] for r in scripted.seen]
    assert paths == [
        "/public/releases?dataset=5&offset=0", "/public/releases?dataset=5&offset=1",
        "/datasets/5/releases?offset=0", "/releases/r1",
    ]  # fmt: skip
    keyless = [r for i, r in enumerate(scripted.seen) if i != 2]
    assert all("Authorization" not in r["headers"] for r in keyless)
    assert scripted.seen[2]["headers"]["Authorization"] == "Bearer k"
