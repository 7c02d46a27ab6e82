"""Queries and the ledger through HTTP (issue 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app import core
from app.answers.schemas import StatisticAnswer
from app.core.mechanisms import bounds
from app.ledger.models import BudgetReset, LedgerEntry
from app.releases.schemas import ReleaseIn
from tests.integration.grid_fixtures import (
    CELL_A,
    CELL_B,
    GRID_A,
    GRID_B,
    analyst,
    load,
    load_two_grids,
    make_dataset,
)

U = 10.0  # the value bound of make_dataset


@pytest.fixture(scope="module")
def unspent_grids(shared_client: TestClient) -> tuple[int, str, str]:
    """``grids`` for the module's refused queries, which share it: none may spend."""
    return load_two_grids(shared_client)


def _error(resp, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code, resp.text


def test_roles(client: TestClient, grids) -> None:
    ds, a, _ = grids
    hdr = analyst(client)
    _error(
        client.get(f"/grids/{a}/mean", params={"epsilon": 0.1}, headers={"Authorization": ""}),
        401,
        "unauthenticated",
    )
    assert client.get(f"/grids/{a}/mean", params={"epsilon": 0.1}, headers=hdr).status_code == 200
    assert client.get(f"/datasets/{ds}/budget", headers=hdr).status_code == 200
    _error(client.get(f"/datasets/{ds}/ledger", headers=hdr), 403, "forbidden")
    _error(
        client.post(f"/datasets/{ds}/budget/reset", json={"reason": "x"}, headers=hdr),
        403,
        "forbidden",
    )


def test_baseline_mean_fields_follow_the_formulas(client: TestClient, grids) -> None:
    _, a, _ = grids
    eps = 0.5
    body = client.get(f"/grids/{a}/mean", params={"epsilon": eps, "mechanism": "baseline"}).json()
    sens = bounds.mean_sensitivity(U, 5, 8)
    assert body["mechanism"] == "baseline" and body["statistic"] == "mean"
    assert body["sensitivity"] == pytest.approx(sens)
    assert body["noise_scale"] >= sens / eps and body["noise_scale"] == pytest.approx(sens / eps)
    assert body["worst_case_bias"] == 0
    assert body["worst_case_error"] == pytest.approx(body["noise_scale"])
    # baseline has no bias: estimate ± b ln 20, projected onto [0, U] like the estimate
    half = body["noise_scale"] * math.log(20)
    lo, hi = body["ci95"]
    assert 0.0 <= lo <= body["estimate"] <= hi <= U
    # a note only where the interval reaches the whole range (it is published all the same)
    assert (body["ci95_note"] is None) == ((lo, hi) != (0.0, U))
    if 0.0 < body["estimate"] < U:  # not projected: the interval is the plain one, clipped
        want = [max(0.0, body["estimate"] - half), min(U, body["estimate"] + half)]
        assert body["ci95"] == pytest.approx(want)
    assert (body["n_users"], body["n_users_charged"], body["cached"]) == (3, 3, False)
    assert body["epsilon"] == eps and body["grid_id"] == a


@pytest.mark.parametrize("mechanism", sorted(core.MEAN_MECHANISMS))
def test_every_answer_matches_the_documented_schema(
    shared_client: TestClient, own_grids, mechanism
) -> None:
    """The endpoints send the service's dict unvalidated: it must be a StatisticAnswer,
    field for field, fresh and cached."""
    client, (_, a, _) = shared_client, own_grids
    params = {"epsilon": 0.7, "mechanism": mechanism}
    for cached in (False, True):
        body = client.get(f"/grids/{a}/mean", params=params).json()
        assert set(body) == set(StatisticAnswer.model_fields), body
        assert StatisticAnswer.model_validate(body).model_dump(mode="json") == body
        assert body["cached"] is cached
    var = client.get(f"/grids/{a}/variance", params={"epsilon": 0.3}).json()
    assert StatisticAnswer.model_validate(var).model_dump(mode="json") == var


@pytest.mark.parametrize("mechanism", ["levy", "quantile_fixed", "clip"])
def test_answers_lie_in_range_with_an_honest_or_null_interval(
    shared_client: TestClient, own_grids, mechanism: str
) -> None:
    client, (_, a, _) = shared_client, own_grids
    body = client.get(f"/grids/{a}/mean", params={"epsilon": 0.4, "mechanism": mechanism}).json()
    assert 0.0 <= body["estimate"] <= U
    if mechanism == "clip":
        lo, hi = body["ci95"]
        assert (body["ci95_note"] is None) == ((lo, hi) != (0.0, U))
        assert 0.0 <= lo <= body["estimate"] <= hi <= U
        assert hi - lo <= 2 * (body["noise_scale"] * math.log(20) + body["worst_case_bias"])
    else:  # a privately chosen projection: no data-independent bias bound, no interval
        assert body["ci95"] is None and body["worst_case_bias"] is None
        assert mechanism in body["ci95_note"]
    var = client.get(f"/grids/{a}/variance", params={"epsilon": 0.4, "mechanism": "clip"}).json()
    assert 0.0 <= var["ci95"][0] <= var["estimate"] <= var["ci95"][1] <= U * U / 4
    auto = client.get(f"/grids/{a}/variance", params={"epsilon": 0.1}).json()
    assert 0.0 <= auto["estimate"] <= U * U / 4
    # every auto answer has an interval here (the window variance bounds what it clips)
    assert auto["mechanism"] == "window" and auto["worst_case_bias"] is None
    lo, hi = auto["ci95"]
    assert 0.0 <= lo <= auto["estimate"] <= hi <= U * U / 4


def test_answers_stored_before_ci95_note_still_read_back(client: TestClient, grids, app) -> None:
    """An answer stored by an earlier version (no ``ci95_note``) is served from the cache
    and is still a valid StatisticAnswer (the note reads as null)."""
    from app.queries.models import QueryAnswer

    _, a, _ = grids
    q = {"epsilon": 0.3, "mechanism": "baseline"}
    first = client.get(f"/grids/{a}/mean", params=q).json()
    with app.state.sessionmaker() as s:
        row = s.scalars(select(QueryAnswer).where(QueryAnswer.public_id == first["query_id"])).one()
        old = {k: v for k, v in row.answer.items() if k != "ci95_note"}
        row.answer = old
        s.commit()
    again = client.get(f"/grids/{a}/mean", params=q)
    assert again.status_code == 200
    body = again.json()
    assert body["cached"] is True and "ci95_note" not in body
    assert StatisticAnswer.model_validate(body).ci95_note is None
    assert body["estimate"] == first["estimate"]


def test_variance_and_clip_fields_follow_the_formulas(client: TestClient, grids) -> None:
    _, a, _ = grids
    eps = 0.5
    var = client.get(
        f"/grids/{a}/variance", params={"epsilon": eps, "mechanism": "baseline"}
    ).json()
    assert var["sensitivity"] == pytest.approx(bounds.variance_sensitivity(U, 5, 8))
    assert var["noise_scale"] == pytest.approx(var["sensitivity"] / eps)
    clip = client.get(
        f"/grids/{a}/mean", params={"epsilon": eps, "mechanism": "clip", "m": 2}
    ).json()
    kept = 1 + 2 + 2  # Γ = min(m_l, 2)
    assert clip["sensitivity"] == pytest.approx(bounds.mean_sensitivity(U, 2, kept))
    assert clip["worst_case_bias"] == pytest.approx(bounds.mean_clip_bias(U, kept, 8))
    assert clip["worst_case_error"] == pytest.approx(clip["worst_case_bias"] + clip["noise_scale"])


def test_cached_repeat_charges_nothing(client: TestClient, grids) -> None:
    ds, a, _ = grids
    q = {"epsilon": 0.25, "mechanism": "baseline"}
    first = client.get(f"/grids/{a}/mean", params=q).json()
    second = client.get(f"/grids/{a}/mean", params=q).json()
    assert second["cached"] is True and first["cached"] is False
    assert second["estimate"] == first["estimate"] and second["query_id"] == first["query_id"]
    budget = client.get(f"/datasets/{ds}/budget").json()
    assert budget["max_spent"] == 0.25
    ledger = client.get(f"/datasets/{ds}/ledger").json()["users"]
    assert sorted(u["spent_exact"] for u in ledger) == ["0.250000000000"] * 3


def test_a_renamed_mechanism_runs_under_its_new_name(client: TestClient, grids) -> None:
    """centered_clip became centred_clip (one spelling): the old name still runs, is
    answered under the new one, and is the same query (served from the store)."""
    _, a, _ = grids
    old = client.get(f"/grids/{a}/mean", params={"epsilon": 0.5, "mechanism": "centered_clip"})
    assert old.status_code == 200, old.text
    assert old.json()["mechanism"] == "centred_clip" and old.json()["cached"] is False
    new = client.get(f"/grids/{a}/mean", params={"epsilon": 0.5, "mechanism": "centred_clip"})
    assert new.json()["cached"] is True and new.json()["query_id"] == old.json()["query_id"]
    body = ReleaseIn(slot_start="2024-03-05T10:00:00Z", epsilon=1, mechanism="centered_clip")
    assert body.mechanism == "centred_clip"  # a release body too


def test_budget_refused_when_a_user_would_pass_the_cap(client: TestClient, grids) -> None:
    ds, a, b = grids
    assert (
        client.get(f"/grids/{a}/mean", params={"epsilon": 0.6, "mechanism": "baseline"}).status_code
        == 200
    )
    # u3 is in both grids: 0.6 + 0.6 > 1.0
    _error(
        client.get(f"/grids/{b}/mean", params={"epsilon": 0.6, "mechanism": "baseline"}),
        403,
        "budget_exhausted",
    )
    assert (
        client.get(f"/grids/{b}/mean", params={"epsilon": 0.4, "mechanism": "baseline"}).status_code
        == 200
    )
    users = {u["spent_exact"] for u in client.get(f"/datasets/{ds}/ledger").json()["users"]}
    assert users == {"0.600000000000", "1.000000000000", "0.400000000000"}
    budget = client.get(f"/datasets/{ds}/budget").json()
    assert budget["max_spent"] == 1.0 and budget["users_at_cap"] == 1


def test_exclude_drops_exhausted_users(client: TestClient) -> None:
    ds = make_dataset(client, on_exhausted="exclude")
    ids = load(client, ds, {CELL_A: GRID_A, CELL_B: GRID_B})
    a, b = ids[CELL_A], ids[CELL_B]
    assert (
        client.get(f"/grids/{b}/mean", params={"epsilon": 1.0, "mechanism": "baseline"}).status_code
        == 200
    )
    body = client.get(f"/grids/{a}/mean", params={"epsilon": 0.5, "mechanism": "baseline"}).json()
    assert body["n_users"] == 3 and body["n_users_charged"] == 2  # u3 is exhausted
    # the bias bound now covers the 5 left-out records of u3 (linear rule: U(1 - 3/8))
    assert body["worst_case_bias"] == pytest.approx(U * 5 / 8)
    spent = sorted(u["spent_exact"] for u in client.get(f"/datasets/{ds}/ledger").json()["users"])
    assert spent == ["0.500000000000", "0.500000000000", "1.000000000000", "1.000000000000"]


def test_reset_opens_new_epoch_and_keeps_history(client: TestClient, grids, app) -> None:
    ds, a, _ = grids
    q = {"epsilon": 1.0, "mechanism": "baseline"}
    assert client.get(f"/grids/{a}/mean", params=q).status_code == 200
    _error(client.get(f"/grids/{a}/variance", params=q), 403, "budget_exhausted")
    _error(client.post(f"/datasets/{ds}/budget/reset", json={}), 400, "invalid_request")
    assert client.post(f"/datasets/{ds}/budget/reset", json={"reason": "new month"}).json() == {
        "epoch": 2
    }
    assert client.get(f"/datasets/{ds}/budget").json()["epoch"] == 2
    again = client.get(f"/grids/{a}/mean", params=q).json()
    assert again["cached"] is False and again["epoch"] == 2
    old = client.get(f"/datasets/{ds}/ledger", params={"epoch": 1}).json()
    assert {u["spent"] for u in old["users"]} == {1.0}
    with app.state.sessionmaker() as s:
        resets = s.scalars(select(BudgetReset)).all()
        entries = s.scalars(select(LedgerEntry).order_by(LedgerEntry.id)).all()
    assert [(r.from_epoch, r.to_epoch, r.reason) for r in resets] == [(1, 2, "new month")]
    assert resets[0].key_id is not None
    assert [e.epoch for e in entries] == [1, 2]


def test_key_quota_is_enforced(client: TestClient, grids) -> None:
    _, a, b = grids
    hdr = analyst(client, quota=0.5)
    ok = client.get(
        f"/grids/{a}/mean", params={"epsilon": 0.3, "mechanism": "baseline"}, headers=hdr
    )
    assert ok.status_code == 200
    _error(
        client.get(
            f"/grids/{b}/mean", params={"epsilon": 0.3, "mechanism": "baseline"}, headers=hdr
        ),
        403,
        "budget_exhausted",
    )
    assert (
        client.get(
            f"/grids/{b}/mean", params={"epsilon": 0.2, "mechanism": "baseline"}, headers=hdr
        ).status_code
        == 200
    )


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"epsilon": "nan"}, 400),
        ({"epsilon": "inf"}, 400),
        ({"epsilon": "-inf"}, 400),
        ({"epsilon": "1e308"}, 400),
        ({"epsilon": 0}, 400),
        ({"epsilon": -1}, 400),
        ({"epsilon": 10.5}, 400),
        ({"epsilon": "abc"}, 400),
        ({}, 400),
        ({"epsilon": 0.1, "mechanism": "nope"}, 400),
        ({"epsilon": 0.1, "mechanism": "baseline", "gamma": 0.3}, 400),
        ({"epsilon": 0.1, "colour": "red"}, 400),
        ({"epsilon": 0.1, "mechanism": "clip", "m": "x"}, 400),
        ({"epsilon": 0.1, "mechanism": "clip", "m": "1; DROP TABLE records"}, 400),
    ],
)
def test_bad_queries_are_refused_and_charge_nothing(
    shared_client: TestClient, unspent_grids, params, status
) -> None:
    ds, a, _ = unspent_grids
    resp = shared_client.get(f"/grids/{a}/mean", params=params)
    _error(resp, status, "invalid_request")
    assert shared_client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0


def test_unknown_grid_is_404(client: TestClient, grids) -> None:
    for bad in ("nope", "' OR 1=1 --", "x" * 300):
        _error(client.get(f"/grids/{bad}/mean", params={"epsilon": 0.1}), 404, "not_found")


def test_quote_is_free_and_consistent(client: TestClient) -> None:
    ds = make_dataset(client, budget_per_user=10.0)
    a = load(client, ds, {CELL_A: GRID_A})[CELL_A]
    target = 3.0  # below U/2, so no data-independent answer reaches it
    quote = client.get(
        f"/grids/{a}/quote", params={"statistic": "mean", "target_error": target}
    ).json()
    assert quote["achievable"] is True
    eps, mech = quote["epsilon"], quote["mechanism"]
    assert 0 < eps <= 10
    assert client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0
    body = client.get(f"/grids/{a}/mean", params={"epsilon": eps, "mechanism": mech}).json()
    assert body["worst_case_error"] <= target * (1 + 1e-9)
    # baseline alone would need eps = U m* / (n target); the quote is never worse
    assert eps <= U * 5 / (8 * target) * (1 + 1e-9)
    # and it is the smallest: 1% less epsilon misses the target with every bounded mechanism
    # (planning from public counts costs nothing)
    counts = np.array([len(v) for v in GRID_A.values()])
    for name, spec in core.MEAN_MECHANISMS.items():
        if spec.bounded and name != "auto":
            assert core.plan_mean(counts, U, eps * 0.99, name).worst_case_error > target, name
    impossible = client.get(f"/grids/{a}/quote", params={"target_error": 1e-9}).json()
    assert impossible["achievable"] is False and impossible["epsilon"] is None
    var = client.get(f"/grids/{a}/quote", params={"statistic": "variance", "target_error": 30})
    assert var.status_code == 200 and var.json()["statistic"] == "variance"


def test_auto_objective_interval_is_a_query_option(client: TestClient, grids) -> None:
    _, a, _ = grids
    params = {"epsilon": 0.3, "objective": "interval"}
    resp = client.get(f"/grids/{a}/mean", params=params)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["mechanism"] == "capped_weights" and body["worst_case_bias"] is not None
    lo, hi = body["ci95"]
    assert 0.0 <= lo <= body["estimate"] <= hi <= U
    var = client.get(f"/grids/{a}/variance", params=params).json()
    assert var["mechanism"] == "clip"
    bad = client.get(f"/grids/{a}/mean", params={"epsilon": 0.7, "objective": "narrow"})
    assert bad.status_code == 400 and "objective" in bad.json()["error"]["message"]


@pytest.mark.parametrize("statistic", ["mean", "variance"])
def test_a_whole_range_note_suggests_nothing_the_request_asked(
    client: TestClient, grids, statistic: str
) -> None:
    """At a tiny epsilon the interval is mostly the whole range (auto's private window
    choice sometimes lands on a narrower one); a whole-range answer's note says what to
    change (epsilon, a coarser grid) and never suggests the objective already asked."""
    _, a, _ = grids
    top = U if statistic == "mean" else U * U / 4
    whole = 0
    for i in range(40):  # each epsilon a new query; a whole-range answer in 40 is all but sure
        params = {"epsilon": 0.01 + i * 1e-4, "mechanism": "auto", "objective": "interval"}
        body = client.get(f"/grids/{a}/{statistic}", params=params).json()
        if body["ci95"] is not None and tuple(body["ci95"]) != (0.0, top):
            assert body.get("ci95_note") is None, body
            continue
        whole += 1
        note = body["ci95_note"]
        assert note and "epsilon" in note and "objective" not in note, body
        if whole == 3:
            break
    assert whole == 3, "no whole-range answer at tiny epsilons"
