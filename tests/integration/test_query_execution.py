"""How a query runs: the ledger's new accounts analysed, the cached-answer index, large
grids off the event loop, a grid changed under a query, the grid cache (the answers
themselves: test_queries.py)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from app.datasets.grid_store import (
    GridChanged,
    clear_grid_cache,
    grid_cache_info,
    load_grid_snapshot,
)
from app.datasets.models import Grid
from app.ledger.repository import needs_analyze
from app.queries import service
from app.queries.repository import _LOOKUP_SQL
from app.queries.store import QueryStore
from tests.helpers import upload_csv
from tests.integration.grid_fixtures import make_dataset


def test_new_accounts_are_analyzed(client: TestClient, grids, app) -> None:
    """Postgres with autovacuum off (as on CI) never gathers statistics by itself; without
    them the commit function checks ``user_id = ANY(...)`` row by row over all of a
    dataset's accounts. The first charge of a grid's users analyzes ``budget_accounts``."""
    engine = app.state.engine
    _, a, _ = grids
    known = "SELECT reltuples FROM pg_class WHERE oid = 'budget_accounts'::regclass"
    with engine.connect() as conn:
        assert conn.exec_driver_sql(known).scalar_one() < 0  # a new schema: never analyzed
    charged = client.get(f"/grids/{a}/mean", params={"epsilon": 0.1, "mechanism": "baseline"})
    assert charged.json()["n_users_charged"] == 3
    with engine.connect() as conn:
        assert conn.exec_driver_sql(known).scalar_one() == 3  # grid A's three users


def test_cached_answer_lookup_uses_all_four_index_keys(client: TestClient, grids, app) -> None:
    """Without statistics Postgres once planned the stored-answer look-up as a scan of
    the whole unique index filtered by fingerprint (slower with every answer stored);
    the generic plan must use the grid, epoch, version and fingerprint as index keys."""
    engine = app.state.engine
    _, a, _ = grids
    for eps in (0.01, 0.02, 0.03):  # some stored answers, never analyzed
        assert client.get(f"/grids/{a}/mean", params={"epsilon": eps}).status_code == 200
    sql = _LOOKUP_SQL.replace("%(fingerprint)s", "$1").replace("%(public_id)s", "$2")
    with engine.connect() as conn:
        conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        conn.exec_driver_sql(f"PREPARE lookup (varchar, varchar) AS {sql}")
        plan = "\n".join(conn.exec_driver_sql(f"EXPLAIN EXECUTE lookup ('x', '{a}')").scalars())
    scan = plan[plan.index("on query_answers") :]
    index_cond = next(line for line in scan.splitlines() if "Index Cond" in line)
    for key in ("grid_id", "epoch", "grid_version", "fingerprint"):
        assert key in index_cond, plan


@pytest.mark.parametrize("limit", [0, 10**9])
def test_large_grids_are_released_off_the_event_loop(
    client: TestClient, grids, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """A release over more records than the limit runs on a worker thread (it would
    stall every request of the process on the loop); a small one runs on the loop."""
    where: list[str] = []
    real = service.ReleaseStep.run

    def spy(step: service.ReleaseStep):
        try:
            asyncio.get_running_loop()
            where.append("loop")
        except RuntimeError:
            where.append("thread")
        return real(step)

    monkeypatch.setattr(service.ReleaseStep, "run", spy)
    monkeypatch.setattr(service, "RELEASE_ON_LOOP_MAX_RECORDS", limit)
    _, a, _ = grids
    resp = client.get(f"/grids/{a}/mean", params={"epsilon": 0.2, "mechanism": "baseline"})
    assert resp.status_code == 200, resp.text
    # once, also on Postgres, where the grid's first commit finds no accounts, creates
    # them and commits the same (unseen) release again
    assert where == ["thread" if limit == 0 else "loop"]


def test_a_grid_changed_under_the_query_is_looked_up_again(
    client: TestClient, grids, app, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload committing between the look-up and the snapshot read: the snapshot no
    longer has the version looked up (409 ``GridChanged``); the query looks again."""
    _, a, _ = grids
    clear_grid_cache()
    with app.state.sessionmaker() as session:
        row = session.scalars(select(Grid).where(Grid.public_id == a)).one()
        ahead = SimpleNamespace(id=row.id, public_id=row.public_id, version=row.version + 1)
        with pytest.raises(GridChanged, match="changed while it was read"):
            load_grid_snapshot(session, ahead)
    assert GridChanged.status_code == 409

    calls: list[int] = []
    real = QueryStore.snapshot

    async def flaky(self, ctx):
        calls.append(ctx.version)
        if len(calls) == 1:
            raise GridChanged("an upload committed meanwhile")
        return await real(self, ctx)

    monkeypatch.setattr(QueryStore, "snapshot", flaky)
    resp = client.get(f"/grids/{a}/mean", params={"epsilon": 0.3, "mechanism": "baseline"})
    assert resp.status_code == 200, resp.text
    assert len(calls) >= 2


def test_accounts_analyze_skips_while_another_transaction_analyzes(client: TestClient, app) -> None:
    """Two ANALYZEs of ``budget_accounts`` wait for each other's commit: a release that grew
    the accounts skips its own at once while another transaction (any dataset's release)
    holds that lock, and its transaction goes on; with the lock free, it analyzes."""
    from sqlalchemy.orm import Session

    from app.ledger.repository import LedgerRepository

    known = "SELECT reltuples FROM pg_class WHERE oid = 'budget_accounts'::regclass"
    with Session(app.state.engine) as holder, Session(app.state.engine) as other:
        holder.execute(text("ANALYZE budget_accounts"))  # held to its commit
        started = time.perf_counter()
        LedgerRepository(other).analyze_after_growth(10**6)
        assert time.perf_counter() - started < 1.0  # not the lock timeout's seconds
        assert other.execute(text("SELECT 1")).scalar_one() == 1  # still usable
        other.rollback()
        holder.commit()
        other.execute(text("INSERT INTO budget_accounts (dataset_id, epoch, user_id, spent) "
                           "VALUES (-1, 0, 1, 0)"))  # fmt: skip
        LedgerRepository(other).analyze_after_growth(10**6)
        assert other.execute(text(known)).scalar_one() >= 1  # analyzed, with its own row
        other.rollback()


def test_needs_analyze_when_never_analyzed_or_after_a_large_batch() -> None:
    assert needs_analyze(-1.0, 1)  # never analyzed
    assert not needs_analyze(30.0, 30)  # within 50 + 3
    assert needs_analyze(30.0, 54)
    assert not needs_analyze(1000.0, 150)  # within 50 + 100
    assert needs_analyze(1000.0, 151)


def test_commit_function_probes_the_primary_key_as_accounts_grow(client: TestClient, app) -> None:
    """12 grids of 50 users charged one after another: the commit function may not scan
    every account of the dataset to charge one grid's (migration 0004), though the
    statistics were taken when the first grid's 50 accounts were all there were."""
    ds = make_dataset(client, budget_per_user=100.0)
    lines = ["user_id,timestamp,lat,lon,value"]
    for cell in range(12):
        lat, lon = 30.20 + 0.03 * (cell % 4), -97.80 + 0.03 * (cell // 4)
        lines += [f"c{cell}u{u},2024-03-05T10:00:{u:02d}Z,{lat},{lon},{u % 10}" for u in range(50)]
    assert upload_csv(client, ds, "\n".join(lines) + "\n")["rejected"] == 0
    grid_ids = [g["grid_id"] for g in client.get(f"/datasets/{ds}/grids").json()["grids"]]
    assert len(grid_ids) == 12
    for g in grid_ids:
        resp = client.get(f"/grids/{g}/mean", params={"epsilon": 0.1, "mechanism": "baseline"})
        assert resp.json()["n_users_charged"] == 50
    with app.state.engine.connect() as conn:
        known = conn.exec_driver_sql(
            "SELECT reltuples FROM pg_class WHERE oid = 'budget_accounts'::regclass"
        ).scalar_one()
        config = conn.exec_driver_sql(
            "SELECT proconfig FROM pg_proc WHERE proname = 'dpgate_commit_query'"
            " AND pronamespace = current_schema()::regnamespace"
        ).scalar_one()
        conn.exec_driver_sql("SET enable_seqscan = off")  # as inside the function
        plan = "\n".join(
            conn.exec_driver_sql(
                f"EXPLAIN SELECT spent FROM budget_accounts WHERE dataset_id = {ds} AND epoch = 1"
                " AND window_start = '0001-01-01'"
                " AND user_id = ANY ('{1,2,3,4,5,6,7,8,9,10}'::integer[]) FOR UPDATE"
            ).scalars()
        )
    assert known == 50  # analyzed once; the planner scales it by the table's size
    assert config == ["enable_seqscan=off"]
    index_cond = next(line for line in plan.splitlines() if "Index Cond" in line)
    assert "user_id" in index_cond, plan


def test_a_query_looks_its_grid_up_in_the_cache_once(client: TestClient, grids) -> None:
    """The query path reads the snapshot cache once per query: one miss (then the
    database), then hits — not a second look-up, nor a miss counted twice."""
    _, a, _ = grids
    clear_grid_cache()
    before = grid_cache_info()
    for eps in (0.11, 0.12):
        resp = client.get(f"/grids/{a}/mean", params={"epsilon": eps, "mechanism": "baseline"})
        assert resp.status_code == 200, resp.text
    after = grid_cache_info()
    assert after["misses"] - before["misses"] == 1
    assert after["hits"] - before["hits"] == 1
    assert after["entries"] == 1
