"""A query new to the process is released on the grid's remembered context without a
look-up (``app.queries.known``), and the commit statement checks that context: a query
asked before is looked up, and a grid, epoch or answer that moved on is found by the
commit, which writes nothing; the query is then looked up and answered as before."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.ledger.models import LedgerEntry
from app.queries.known import KnownGrids
from app.queries.store import QueryStore
from tests.helpers import upload_csv
from tests.integration.grid_fixtures import CELL_A, csv_for

PARAMS = {"mechanism": "baseline"}


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The grid of each look-up the query path makes."""
    calls: list[str] = []
    real = QueryStore.lookup

    async def counted(self: QueryStore, grid_public_id: str, fingerprint: str):  # type: ignore[no-untyped-def]
        calls.append(grid_public_id)
        return await real(self, grid_public_id, fingerprint)

    monkeypatch.setattr(QueryStore, "lookup", counted)
    return calls


def _ask(client: TestClient, grid: str, eps: float) -> dict:
    resp = client.get(f"/grids/{grid}/mean", params={**PARAMS, "epsilon": eps})
    assert resp.status_code == 200, resp.text
    return resp.json()


def _entries(app: FastAPI, dataset_id: int) -> int:
    with app.state.sessionmaker() as session:
        count = select(func.count()).where(LedgerEntry.dataset_id == dataset_id)
        return int(session.scalar(count) or 0)


def test_a_new_query_on_a_known_grid_makes_no_look_up(
    client: TestClient, app: FastAPI, grids, lookups: list[str]
) -> None:
    ds, a, _ = grids
    first = _ask(client, a, 0.21)  # the grid unknown here: looked up
    assert lookups == [a] and not first["cached"]
    second = _ask(client, a, 0.22)  # known grid, new query: no look-up, charged
    assert lookups == [a] and not second["cached"]
    assert _entries(app, ds) == 2
    again = _ask(client, a, 0.22)  # asked before: looked up, served from the store
    assert lookups == [a, a] and again["cached"]
    assert {k: v for k, v in again.items() if k != "cached"} == {
        k: v for k, v in second.items() if k != "cached"
    }
    assert _entries(app, ds) == 2


def test_a_query_answered_by_another_process_is_served_not_charged(
    client: TestClient, app: FastAPI, grids, lookups: list[str]
) -> None:
    """Another process answered it: this one releases it unlooked, and the commit finds
    the twin (the fresh release is discarded unseen, nothing charged)."""
    ds, a, _ = grids
    _ask(client, a, 0.31)
    answered = _ask(client, a, 0.32)
    app.state.known_grids._asked.clear()  # as a process that has not seen it
    lookups.clear()
    twin = _ask(client, a, 0.32)
    assert lookups == [] and twin["cached"] and twin["query_id"] == answered["query_id"]
    assert _entries(app, ds) == 2


def test_an_upload_since_is_found_by_the_commit(
    client: TestClient, app: FastAPI, grids, lookups: list[str]
) -> None:
    """The grid's version moved on after it was remembered: the commit writes nothing,
    the query is looked up and answered on the new version."""
    ds, a, _ = grids
    before = _ask(client, a, 0.41)
    upload_csv(client, ds, csv_for({CELL_A: {"u9": [3.0, 4.0]}}))
    lookups.clear()
    after = _ask(client, a, 0.42)
    assert lookups == [a]  # the unlooked commit found the grid moved on
    assert after["n_users"] == before["n_users"] + 1
    assert _entries(app, ds) == 2
    assert app.state.known_grids._grids[a].version > 0


def test_a_reset_since_is_found_by_the_commit(
    client: TestClient, app: FastAPI, grids, lookups: list[str]
) -> None:
    ds, a, _ = grids
    assert _ask(client, a, 0.51)["epoch"] == 1
    reset = client.post(f"/datasets/{ds}/budget/reset", json={"reason": "test"})
    assert reset.status_code == 200, reset.text
    lookups.clear()
    after = _ask(client, a, 0.52)
    assert lookups == [a] and after["epoch"] == 2 and not after["cached"]


def test_a_refusal_on_the_unlooked_path_is_the_usual_403(
    client: TestClient, grids, lookups: list[str]
) -> None:
    """The budget (1.0 per user) runs out on a known grid: the commit refuses, as ever."""
    _, a, _ = grids
    _ask(client, a, 0.6)
    lookups.clear()
    resp = client.get(f"/grids/{a}/mean", params={**PARAMS, "epsilon": 0.5})
    assert resp.status_code == 403, resp.text
    assert resp.json()["error"]["code"] == "budget_exhausted"
    assert lookups == []


def test_known_grids_forget_the_oldest() -> None:
    known = KnownGrids(max_grids=2, max_asked=2)
    assert known.unasked("g", "f1") is None  # not known: look it up
    assert known.unasked("g", "f1") is None  # asked before
    known.unasked("g", "f2")
    known.unasked("g", "f3")  # f1 forgotten
    assert list(known._asked) == [("g", "f2"), ("g", "f3")]
    for g in ("g1", "g2", "g3"):
        known.remember(SimpleNamespace(public_id=g))  # type: ignore[arg-type]
    assert list(known._grids) == ["g2", "g3"]
    assert known.unasked("g3", "f").public_id == "g3"  # type: ignore[union-attr]
    known.forget("g3")
    assert known.unasked("g3", "f4") is None
