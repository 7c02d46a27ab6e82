"""The Postgres function ``dpgate_commit_query`` decides and writes as the Python rule
(``app.ledger.rule.charge_verdict``, on ``app.budget``'s cap test) says, case by case:
the function is the one allowed second copy of the budget rule.

Each scenario builds a small world straight in the database (a dataset, a key, users
with given spends, maybe a twin answer or a moved epoch, maybe budget windows with
spends in the window before the grid's), asks the rule what it expects from those
inputs — the accounts of the charge's window only, as ``app.ledger.service`` locks them
— commits through the function and checks the verdict and the writes: on ``ok`` each
user's spend in the grid's window grew by exactly epsilon (every other window's
unchanged), one ledger entry (of that window) and one answer were added and the key's
quota was spent; otherwise nothing changed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import numpy as np
import pytest
from psycopg import AsyncConnection
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.budget import Budget, exhausted
from app.datasets.models import Dataset, DatasetUser, Grid
from app.db.engine import make_engine, make_sessionmaker
from app.db.liveness import conninfo_from_url
from app.keys.models import ApiKey
from app.ledger import service as ledger
from app.ledger.committer import Committed, QueryCommitter
from app.ledger.models import BudgetAccount, LedgerEntry
from app.ledger.rule import Charge, Verdict, charge_verdict
from app.queries.models import QueryAnswer
from app.queries.repository import AnswerRecord
from app.time.budget_windows import ALL_TIME, window_of
from tests.schema_pool import SchemaPool

PICO = Decimal("0.000000000001")


@dataclass(frozen=True)
class Scenario:
    spent: dict[int, Decimal]  # user index -> spend; users without one have no account
    charged: tuple[int, ...]  # user indices charged
    epsilon: Decimal
    cap: Decimal = Decimal(1)
    quota: Budget | None = None
    stale: bool = False
    twin: bool = False
    n_users: int = 5
    budget_window: str = "none"
    # user index -> spend in the window before the grid's (budget windows only)
    other_spent: dict[int, Decimal] = field(default_factory=dict)


@dataclass
class World:
    dataset_id: int
    key_id: int
    grid_id: int
    users: list[int]  # user index -> dataset_users.id
    record: AnswerRecord
    charge: Charge
    scenario: Scenario
    window: date  # the grid's budget window
    accounts: dict[int, Decimal] = field(default_factory=dict)  # its window's, by user id


def _build(session: Session, sc: Scenario) -> World:
    tag = uuid.uuid4().hex[:12]
    ds = Dataset(
        name=f"d{tag}", value_bound=10.0, h3_resolution=8, timeslot_minutes=60,
        timezone="UTC", budget_per_user=sc.cap, max_epsilon_per_query=Decimal(5),
        on_exhausted="refuse", epoch=1, budget_window=sc.budget_window,
    )  # fmt: skip
    key = ApiKey(
        name=f"k{tag}", role="analyst", key_hash=tag * 5, prefix=tag[:8],
        epsilon_quota=None if sc.quota is None else sc.quota.cap,
        epsilon_spent=Decimal(0) if sc.quota is None else sc.quota.spent,
    )  # fmt: skip
    session.add_all([ds, key])
    session.flush()
    grid = Grid(
        public_id=tag, dataset_id=ds.id, h3_cell="882a100d25fffff",
        slot_start=datetime(2024, 3, 5, 10, tzinfo=UTC), version=1,
    )  # fmt: skip
    users = [DatasetUser(dataset_id=ds.id, user_hash=f"{tag}-{i}") for i in range(sc.n_users)]
    session.add_all([grid, *users])
    session.flush()
    ids = [u.id for u in users]
    window = window_of(ds, grid.slot_start)
    assert (window == ALL_TIME) == (sc.budget_window == "none")
    session.add_all(
        BudgetAccount(dataset_id=ds.id, epoch=1, window_start=window, user_id=ids[i], spent=s)
        for i, s in sc.spent.items()
    )
    assert not sc.other_spent or window != ALL_TIME  # other windows exist with windows only
    before = window - timedelta(days=1) if sc.other_spent else window
    session.add_all(
        BudgetAccount(dataset_id=ds.id, epoch=1, window_start=before, user_id=ids[i], spent=s)
        for i, s in sc.other_spent.items()
    )
    record = AnswerRecord(
        public_id=uuid.uuid4().hex, dataset_id=ds.id, grid_id=grid.id, epoch=1,
        grid_version=1, fingerprint=tag, statistic="mean", mechanism="baseline",
        epsilon=sc.epsilon, options={}, answer={"query_id": tag, "mean": 1.5}, key_id=key.id,
    )  # fmt: skip
    if sc.twin:
        twin = {**record.__dict__, "public_id": uuid.uuid4().hex, "answer": {"twin": True}}
        session.add(QueryAnswer(**twin))
    if sc.stale:
        ds.epoch = 2
    session.flush()
    charge = Charge.of(
        ds.id, 1, [ids[i] for i in sc.charged], sc.epsilon, window=window, key_id=key.id,
        kind="query", grid_id=grid.id,
    )  # fmt: skip
    accounts = {ids[i]: s for i, s in sc.spent.items()}
    return World(ds.id, key.id, grid.id, ids, record, charge, sc, window, accounts)


def _expected(w: World) -> Verdict:
    sc = w.scenario
    return charge_verdict(
        w.charge,
        epoch_now=2 if sc.stale else 1,
        accounts=w.accounts,
        cap=sc.cap,
        twin=sc.twin,
        quota=sc.quota,
    )


@dataclass(frozen=True)
class State:
    accounts: dict[tuple[date, int], Decimal]  # (window, user id) -> spend
    entries: list[date]  # the windows of the dataset's ledger entries
    answers: int
    key_spent: Decimal


def _state(session: Session, w: World) -> State:
    rows = session.execute(
        select(BudgetAccount.window_start, BudgetAccount.user_id, BudgetAccount.spent).where(
            BudgetAccount.dataset_id == w.dataset_id
        )
    )
    count = func.count()
    return State(
        accounts={(win, u): s for win, u, s in rows},
        entries=list(
            session.scalars(
                select(LedgerEntry.window_start)
                .where(LedgerEntry.dataset_id == w.dataset_id)
                .order_by(LedgerEntry.id)
            )
        ),
        answers=session.scalar(
            select(count).select_from(QueryAnswer).where(QueryAnswer.dataset_id == w.dataset_id)
        )
        or 0,
        key_spent=session.scalars(select(ApiKey.epsilon_spent).where(ApiKey.id == w.key_id)).one(),
    )


Commit = Callable[[World], Committed]


def _function_commit(url: str) -> Commit:
    async def call(w: World) -> Committed:
        conn = await AsyncConnection.connect(conninfo_from_url(url), autocommit=True)
        async with conn:
            return await QueryCommitter(conn).commit_query(
                w.charge, cap=w.scenario.cap, key_has_quota=w.scenario.quota is not None,
                row=w.record,
            )  # fmt: skip

    return lambda w: asyncio.run(call(w))


@pytest.fixture(scope="module")
def worlds_url(schema_pool: SchemaPool) -> Iterator[str]:
    """One schema for the module's tests: each builds worlds of its own (a dataset and a key
    under fresh names) and reads only their rows, so they never see each other's."""
    url, schema = schema_pool.take()
    yield url
    schema_pool.drop_later(schema)


@pytest.fixture(scope="module")
def database(worlds_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(worlds_url)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture(scope="module")
def commit(worlds_url: str) -> Commit:
    """The query commit: one call of the function."""
    return _function_commit(worlds_url)


def _check(make: sessionmaker[Session], commit: Commit, sc: Scenario) -> Verdict:
    """Commit ``sc`` on a fresh world through ``commit``; check verdict and writes."""
    with make.begin() as session:
        w = _build(session, sc)
    with make() as session:
        before = _state(session, w)
    want = _expected(w)
    got = commit(w)
    assert got.verdict is want, (sc, got)
    with make() as session:
        after = _state(session, w)
    if want is Verdict.OK:
        charged = {(w.window, u) for u in w.charge.users}
        grown = {a: s + sc.epsilon if a in charged else s for a, s in before.accounts.items()}
        assert after.accounts == grown
        assert after.entries == before.entries + ([w.window] if w.charge.users else [])
        assert after.answers == before.answers + 1
        quota_spent = before.key_spent + (sc.epsilon if sc.quota is not None else 0)
        assert after.key_spent == quota_spent
    else:
        assert after == before, sc
    if want is Verdict.TWIN:
        assert got.stored == {"twin": True}
    return want


CAP = Decimal(1)
QUOTA = Budget(cap=Decimal("0.5"), spent=Decimal("0.4"))
NAMED = {
    "ok": Scenario({0: Decimal("0.5"), 1: Decimal(0)}, (0, 1), Decimal("0.5")),
    "reaches the cap exactly": Scenario({0: Decimal("0.7")}, (0,), Decimal("0.3")),
    "passes it by one pico": Scenario({0: Decimal("0.7") + PICO}, (0,), Decimal("0.3")),
    "exhausted user": Scenario({0: CAP, 1: Decimal(0)}, (0, 1), Decimal("0.1")),
    "missing account": Scenario({0: Decimal(0)}, (0, 1), Decimal("0.1")),
    "stale epoch": Scenario({0: Decimal(0)}, (0,), Decimal("0.1"), stale=True),
    "twin beats exhausted": Scenario({0: CAP}, (0,), Decimal("0.1"), twin=True),
    "quota": Scenario({0: Decimal(0)}, (0,), Decimal("0.2"), quota=QUOTA),
    "quota reached exactly": Scenario({0: Decimal(0)}, (0,), Decimal("0.1"), quota=QUOTA),
    "nobody charged": Scenario({}, (), Decimal("0.1")),
    "window: the day before's spend does not count": Scenario(
        {0: Decimal("0.5"), 1: Decimal(0)}, (0, 1), Decimal("0.5"), budget_window="day",
        other_spent={0: CAP, 1: CAP}),
    "window: exhausted in the grid's window": Scenario(
        {0: CAP, 1: Decimal(0)}, (0, 1), Decimal("0.1"), budget_window="week",
        other_spent={0: Decimal(0)}),
    "window: passes the cap by one pico": Scenario(
        {0: Decimal("0.7") + PICO}, (0,), Decimal("0.3"), budget_window="month",
        other_spent={0: Decimal(0)}),
    "window: an account in another window is not this one's": Scenario(
        {1: Decimal(0)}, (0, 1), Decimal("0.1"), budget_window="day",
        other_spent={0: Decimal(0)}),
    "window: twin beats exhausted": Scenario(
        {0: CAP}, (0,), Decimal("0.1"), twin=True, budget_window="day"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(NAMED))
def test_named_scenarios_agree_with_the_rule(
    name: str, database: sessionmaker[Session], commit: Commit
) -> None:
    _check(database, commit, NAMED[name])


def _random_scenario(rng: np.random.Generator) -> Scenario:
    """Spends on and around the boundary ``cap - epsilon``, accounts sometimes missing."""
    eps = Decimal(int(rng.integers(1, 400))) / 1000
    near = [Decimal(0), CAP - eps, CAP - eps + PICO, CAP - eps - PICO, CAP]
    n = int(rng.integers(1, 6))
    spent = {i: near[int(rng.integers(0, len(near)))] for i in range(n) if rng.random() < 0.9}
    charged = tuple(i for i in range(n) if rng.random() < 0.8)
    quota = None
    if rng.random() < 0.3:
        limit = Decimal(int(rng.integers(1, 10))) / 10
        quota = Budget(limit, limit - eps + (PICO if rng.random() < 0.5 else 0))
    kind = ("none", "day", "week", "month")[int(rng.integers(0, 4))]
    other = {}
    if kind != "none":  # spends in the window before, on and around the boundary too
        other = {i: near[int(rng.integers(0, len(near)))] for i in range(n) if rng.random() < 0.7}
    return Scenario(
        spent, charged, eps, quota=quota, stale=rng.random() < 0.1, twin=rng.random() < 0.1,
        budget_window=kind, other_spent=other,
    )  # fmt: skip


def test_random_scenarios_agree_with_the_rule(
    database: sessionmaker[Session], commit: Commit
) -> None:
    rng = np.random.default_rng(20261123)
    seen = set()
    for _ in range(40):
        sc = _random_scenario(rng)
        seen.add(_check(database, commit, sc))
    assert seen >= {Verdict.OK, Verdict.EXHAUSTED, Verdict.MISSING}, seen  # the draw covers them


def test_a_replayed_commit_is_served_as_its_twin_and_charges_nothing_again(
    database: sessionmaker[Session], commit: Commit
) -> None:
    sc = NAMED["ok"]
    with database.begin() as session:
        w = _build(session, sc)
    assert commit(w).verdict is Verdict.OK
    with database() as session:
        once = _state(session, w)
    again = commit(w)
    assert again.verdict is Verdict.TWIN and again.stored == w.record.answer
    with database() as session:
        assert _state(session, w) == once


def test_excluding_the_exhausted_users_lets_the_rest_be_charged(
    database: sessionmaker[Session], commit: Commit
) -> None:
    """``exclude`` datasets: the ledger's reading of who is exhausted (no lock) is the
    rule's, and a commit of the others goes through."""
    eps = Decimal("0.4")
    sc = Scenario({0: CAP, 1: Decimal("0.6") + PICO, 2: Decimal("0.6"), 3: Decimal(0)},
                  (0, 1, 2, 3), eps)  # fmt: skip
    with database.begin() as session:
        w = _build(session, sc)
    ids = np.array(w.users[:4])
    with database() as session:
        read = ledger.exhausted_now(session, w.dataset_id, 1, sc.cap, ids, eps, window=w.window)
    assert read.tolist() == exhausted(w.accounts, ids, eps, sc.cap).tolist()
    assert read.tolist() == [True, True, False, False]
    assert commit(w).verdict is Verdict.EXHAUSTED
    kept = Charge.of(w.dataset_id, 1, ids[~read], eps, window=w.window, key_id=w.key_id,
                     kind="query", grid_id=w.grid_id)  # fmt: skip
    w.charge = kept
    assert commit(w).verdict is Verdict.OK


@pytest.mark.parametrize("moved", ["grid version", "dataset cap"])
def test_a_commit_on_a_context_that_moved_on_writes_nothing(
    moved: str, database: sessionmaker[Session], commit: Commit
) -> None:
    """The commit statement calls the function only for the grid at the version released
    and its dataset at the cap passed (a query released on a remembered context,
    ``app.queries.known``): otherwise ``stale`` and nothing written."""
    with database.begin() as session:
        w = _build(session, NAMED["ok"])
    with database() as session:
        before = _state(session, w)
    if moved == "grid version":
        w.record = replace(w.record, grid_version=w.record.grid_version + 1)
    else:
        w.scenario = replace(w.scenario, cap=w.scenario.cap * 2)
    got = commit(w)
    assert got == Committed(Verdict.STALE)
    with database() as session:
        assert _state(session, w) == before
