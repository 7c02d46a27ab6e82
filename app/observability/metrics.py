"""dpgate's Prometheus metrics (``prometheus-client``; multiprocess mode with several workers) and
the ``/metrics`` exposition; pool gauges, users at cap and ``dpgate_database_up`` are read when
scraped."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy.exc import DBAPIError

from app.kit.errors import DPGateError
from app.ledger.repository import LedgerRepository

log = logging.getLogger("dpgate.metrics")

__all__ = ["CONTENT_TYPE_LATEST"]  # re-exported

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUESTS = Counter(
    "dpgate_http_requests",
    "HTTP requests answered, by method, route template and status.",
    ["method", "route", "status"],
)
REQUEST_SECONDS = Histogram(
    "dpgate_http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by method and route template.",
    ["method", "route"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ANONYMOUS_REFUSALS = Counter(
    "dpgate_anonymous_refusals",
    "Requests without a key refused with 429 before routing (also in dpgate_http_requests, "
    "route unmatched; no access line), by the limit reached: address or everyone.",
    ["reason"],
)
ANSWERS = Counter(
    "dpgate_answers",
    "Statistic answers sent (cached: a stored answer served again, charging nothing).",
    ["statistic", "mechanism", "cached"],
)
EPSILON_CHARGED = Counter(
    "dpgate_epsilon_charged",
    "Sum of the epsilons of fresh answers (queries, and each grid of a release), each "
    "charged to every user the answer used, by dataset.",
    ["dataset", "kind"],
)
BUDGET_REFUSALS = Counter(
    "dpgate_budget_refusals",
    "Requests refused with budget_exhausted (a user's budget or a key's quota), by route.",
    ["route"],
)
RELEASES = Counter(
    "dpgate_releases",
    "Whole-slot releases answered (cached: a stored release served again).",
    ["partition", "cached"],
)
RELEASE_SECONDS = Histogram(
    "dpgate_release_duration_seconds",
    "Time to plan, release, store and charge one fresh whole-slot release.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


#: labelled children looked up once per process (``labels`` takes a lock and checks its
#: values each call); bounded by the statistics, mechanisms, datasets and kinds there are
_children: dict[tuple[object, ...], Any] = {}


def child(metric: Counter, *labels: str) -> Any:
    """``metric.labels(*labels)``, remembered."""
    key = (metric, *labels)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*labels)
    return found


def record_answer(statistic: str, mechanism: str, cached: bool) -> None:
    child(ANSWERS, statistic, mechanism, "true" if cached else "false").inc()


def record_charge(dataset_id: int, kind: str, epsilon: Decimal | float) -> None:
    child(EPSILON_CHARGED, str(dataset_id), kind).inc(float(epsilon))


def record_release(dataset_id: int | str, answer: dict[str, Any], seconds: float) -> None:
    """Count a release answer; a fresh one also its duration and its grids' epsilon."""
    cached = bool(answer.get("cached"))
    RELEASES.labels(str(answer.get("partition", "fixed")), str(cached).lower()).inc()
    if not cached:
        RELEASE_SECONDS.observe(seconds)
        per_grid = answer.get("epsilon") or 0.0
        record_charge(int(dataset_id), "release", per_grid * len(answer.get("grids", ())))


class _StateCollector(Collector):
    """Metrics read from the application's ``state`` when scraped."""

    def __init__(self, state: Any) -> None:
        self.state = state


_POOL_GAUGES = (
    ("dpgate_db_pool_size", "Most connections a pool of this process may hold."),
    ("dpgate_db_pool_in_use", "Connections of a pool in use by requests now."),
    ("dpgate_db_pool_waiting", "Requests waiting for a connection of the query pool now."),
)


class PoolCollector(_StateCollector):
    """Connections of this process's two database pools."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        size, busy, waiting = (GaugeMetricFamily(n, t, labels=["pool"]) for n, t in _POOL_GAUGES)
        engine = getattr(self.state, "engine", None)
        if engine is not None and hasattr(engine.pool, "checkedout"):
            pool = engine.pool
            size.add_metric(["main"], pool.size() + max(pool._max_overflow, 0))
            busy.add_metric(["main"], pool.checkedout())
        query_pool = getattr(self.state, "query_pool", None)
        if query_pool is not None:
            stats = query_pool.get_stats()
            size.add_metric(["query"], query_pool.max_size)
            busy.add_metric(["query"], stats.get("pool_size", 0) - stats.get("pool_available", 0))
            waiting.add_metric(["query"], stats.get("requests_waiting", 0))
        yield from (size, busy, waiting)


class LedgerCollector(_StateCollector):
    """Users at their cap per dataset and whether the database answers."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        watch = getattr(self.state, "db_watch", None)
        up = GaugeMetricFamily(
            "dpgate_database_up",
            "1 while this process's heartbeat to the database is answered, else 0 (requests "
            "then answer 503 at once).",
            1 if watch is None or watch.down_since is None else 0,
        )
        at_cap = GaugeMetricFamily(
            "dpgate_users_at_cap",
            "Users whose spend reached the dataset's budget_per_user in its current epoch.",
            None,
            ["dataset"],
        )
        sessions = getattr(self.state, "sessionmaker", None)
        if sessions is not None and (watch is None or watch.down_since is None):
            try:
                with sessions() as session:
                    for dataset_id, n in LedgerRepository(session).users_at_cap():
                        at_cap.add_metric([str(dataset_id)], n)
            except (DBAPIError, DPGateError) as exc:  # the other metrics are still served
                log.warning("users at cap not read for /metrics: %s", exc)
        yield from (up, at_cap)


def exposition(state: Any) -> bytes:
    """The Prometheus text of every metric."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        shared = generate_latest(registry)
    else:
        shared = generate_latest(REGISTRY)
    pools = CollectorRegistry(auto_describe=False)
    pools.register(PoolCollector(state))
    pools.register(LedgerCollector(state))
    return shared + generate_latest(pools)
