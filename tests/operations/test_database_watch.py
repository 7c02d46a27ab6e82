"""The database watch (app/db/watch.py) on both pools, through a proxy that freezes:
statements waiting on a frozen database fail within the deadline, in threads and in
the event loop; requests waiting for a pooled connection stop waiting; new ones are
refused at once until it answers again; a statement that is merely slow is not cut."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.config import Settings
from app.db.engine import make_engine
from app.db.pg_async import make_async_pool
from app.db.watch import DatabaseWatch, make_watch
from app.kit.errors import Unavailable
from tests.freezing_proxy import FreezingProxy, freezing_proxy

DEADLINE = 3.0  # the smallest allowed: the watch calls it down after 2 s of silence


@pytest.fixture
def proxy(postgres_base_url: str) -> Iterator[FreezingProxy]:
    with freezing_proxy(postgres_base_url) as running:
        yield running


def _watched(url: str) -> tuple[DatabaseWatch, object, object]:
    settings = Settings(database_url=url, db_deadline_seconds=DEADLINE)
    watch = make_watch(url, settings)
    engine = make_engine(url, pool_size=2, connect_timeout=2, watch=watch, pool_timeout=DEADLINE)
    pool = make_async_pool(url, size=1, connect_timeout=2, watch=watch, timeout=30)
    return watch, engine, pool


def _select_in_thread(engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


async def _timed(coro) -> tuple[object, float]:
    start = time.monotonic()
    try:
        out: object = await coro
    except Exception as exc:
        out = exc
    return out, time.monotonic() - start


@pytest.mark.slow
def test_frozen_database_fails_fast_on_both_pools_and_recovers(
    proxy: FreezingProxy, postgres_base_url: str
) -> None:
    watch, engine, pool = _watched(proxy.url_for(postgres_base_url))

    async def scenario() -> None:
        await pool.open()
        watch.start()
        try:
            await asyncio.to_thread(_select_in_thread, engine)  # open connections
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
            proxy.freeze()

            async def hung_query() -> None:  # holds the pool's only connection
                async with pool.connection() as conn:
                    await conn.execute("SELECT 1")

            async def waiting_for_the_pool() -> None:
                await asyncio.sleep(0.2)
                async with pool.connection() as conn:
                    await conn.execute("SELECT 1")

            outcomes = await asyncio.gather(
                _timed(hung_query()),
                _timed(waiting_for_the_pool()),
                _timed(asyncio.to_thread(_select_in_thread, engine)),
            )
            (hung, t1), (waiter, t2), (thread, t3) = outcomes
            assert isinstance(hung, psycopg.OperationalError), hung
            assert isinstance(waiter, Unavailable), waiter
            assert isinstance(thread, OperationalError), thread
            assert max(t1, t2, t3) < DEADLINE, outcomes
            # known down: refused at once, without a connection attempt
            refused, took = await _timed(hung_query())
            assert isinstance(refused, Unavailable) and took < 0.1, (refused, took)
            refused, took = await _timed(asyncio.to_thread(_select_in_thread, engine))
            assert isinstance(refused, Unavailable) and took < 0.5, (refused, took)

            proxy.thaw()
            start = time.monotonic()
            while watch.down_since is not None:
                assert time.monotonic() - start < 10, "still down 10 s after the thaw"
                await asyncio.sleep(0.1)
            await hung_query()
            await asyncio.to_thread(_select_in_thread, engine)
        finally:
            proxy.thaw()
            await watch.stop()
            await pool.close()
            engine.dispose()

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_slow_statement_is_not_cut(postgres_base_url: str) -> None:
    watch, engine, pool = _watched(postgres_base_url)

    async def scenario() -> None:
        await pool.open()
        watch.start()
        try:
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_sleep(%s)", [DEADLINE + 1])
            assert watch.down_since is None
        finally:
            await watch.stop()
            await pool.close()
            engine.dispose()

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_stalled_process_is_not_a_silent_database(postgres_base_url: str) -> None:
    """The event loop blocked for longer than the silence (a long computation holding
    the GIL, say) while the database answers: the heartbeat's answer waits unread, and
    the watch must not call the database down and shut every connection."""
    watch, engine, pool = _watched(postgres_base_url)

    async def scenario() -> None:
        await pool.open()
        watch.start()
        try:
            await asyncio.sleep(1.5)  # a heartbeat or two answered
            for _ in range(3):
                await asyncio.sleep(0.05)  # let the next heartbeat be sent
                time.sleep(watch.silence + 1.0)  # the whole process stalls
                await asyncio.sleep(0.5)
                assert watch.down_since is None
            async with pool.connection() as conn:  # the pooled connection was not shut
                await conn.execute("SELECT 1")
        finally:
            await watch.stop()
            await pool.close()
            engine.dispose()

    asyncio.run(scenario())
