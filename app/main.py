"""The ASGI application: routers, error handlers, limits, start-up bootstrap."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

from anyio import CapacityLimiter
from fastapi import FastAPI

from app import __version__
from app.config import Settings, get_settings
from app.core.planning.clip_user import load_clip_user_kernels
from app.datasets.endpoints import router as datasets_router
from app.datasets.grid_store import configure_grid_cache
from app.db.capacity import Capacity
from app.db.embedded import database_url
from app.db.engine import make_engine, make_sessionmaker
from app.db.pg_async import make_async_pool
from app.db.unit import Database
from app.db.watch import make_watch
from app.health.endpoints import router as health_router
from app.http.error_handlers import install_error_handlers
from app.http.limits import (
    UPLOAD_PATH,
    AnonymousLimitMiddleware,
    BodyLimitMiddleware,
    RateLimiter,
)
from app.http.openapi_constraints import install_openapi_constraints
from app.http.read_cache import AnonymousReadCache
from app.ingest.kernels import load_ingest_kernels
from app.instance.service import resolve_hashing_secret
from app.keys.endpoints import router as keys_router
from app.keys.service import ensure_key
from app.ledger.endpoints import router as ledger_router
from app.observability.endpoints import install_observability
from app.plans.endpoints import router as plans_router
from app.queries.endpoints import router as queries_router
from app.queries.known import KnownGrids
from app.releases.endpoints import router as releases_router
from app.releases.public import router as public_releases_router
from app.uploads.endpoints import router as uploads_router
from app.web.endpoints import install_pages

DESCRIPTION = """User-level differentially private statistics over spatio-temporal IoT data.

Every released answer is charged to each data subject it uses, in a ledger that
cannot be overspent. Authenticate with `Authorization: Bearer <key>`.
Every error has the shape `{"error": {"code": ..., "message": ...}}`.

Pages: the catalogue of public releases (`/`), these docs (`/docs`) and a map of a stored
release (`/map`: a public release draws without a key, another asks for one;
`/map#release=<release_id>&key=<key>` draws it straight away). They load nothing from
outside this server. Readers without a key are rate limited per address.
"""


def load_compiled_kernels() -> None:
    """Every compiled (numba) kernel a request runs, loaded (or compiled once) now."""
    load_ingest_kernels()
    load_clip_user_kernels()


def create_app(settings: Settings | None = None, *, freeze_gc: bool = False) -> FastAPI:
    """The application. ``freeze_gc`` (for a serving process, see :func:`create_server_app`)
    moves everything alive after start-up out of the garbage collector's sight."""
    settings = settings or get_settings()
    url = database_url(settings.database_url)
    watch = make_watch(url, settings)
    engine = make_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_pool_size + 2 * settings.heavy_concurrency,
        connect_timeout=settings.db_connect_timeout_seconds,
        statement_timeout=settings.db_statement_timeout_seconds,
        watch=watch,
        pool_timeout=settings.db_deadline_seconds,
        lock_timeout=settings.db_deadline_seconds,
    )
    sessionmaker = make_sessionmaker(engine)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        load_compiled_kernels()  # before serving: no request pays a compile
        # Created here, inside the serving event loop (see app.http.deps.get_session).
        deadline = settings.db_deadline_seconds
        app.state.db_gate = Capacity(settings.db_pool_size, deadline, what="other requests")
        app.state.heavy_gate = Capacity(
            settings.heavy_concurrency, deadline, what="releases and uploads", trim=True
        )
        app.state.db_finish = CapacityLimiter(4 * settings.db_pool_size)
        app.state.database = Database(sessionmaker, app.state.db_gate)
        app.state.known_grids = KnownGrids()  # this serving run's remembered grid contexts
        app.state.query_pool = make_async_pool(
            url,
            size=settings.query_pool_size,
            connect_timeout=settings.db_connect_timeout_seconds,
            statement_timeout=settings.db_statement_timeout_seconds,
            watch=watch,
            timeout=settings.db_deadline_seconds,
            lock_timeout=settings.db_deadline_seconds,
        )
        await app.state.query_pool.open()
        watch.start()
        if settings.admin_key is not None:
            await app.state.database.run(
                partial(
                    ensure_key,
                    secret=settings.admin_key.get_secret_value(),
                    role="admin",
                    name="bootstrap admin (DPGATE_ADMIN_KEY)",
                )
            )
        if freeze_gc:
            # Modules, routes, OpenDP and numpy objects live as long as the process: a
            # full collection walking them all paused every request in flight for
            # ~150 ms (the p99 of the query benchmark). Frozen, they are never walked.
            gc.collect()
            gc.freeze()
        yield
        await watch.stop()
        await app.state.query_pool.close()
        app.state.database.close()
        engine.dispose()

    app = FastAPI(
        title="dpgate",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served from the packaged Swagger UI by app.web (no CDN)
        redoc_url=None,
        redirect_slashes=False,  # a trailing slash is a 404 that says so, not a 307
    )
    app.state.settings = settings
    app.state.db_watch = watch
    app.state.engine = engine
    app.state.sessionmaker = sessionmaker
    app.state.hash_secret = resolve_hashing_secret(settings, engine)
    configure_grid_cache(settings.grid_cache_bytes)
    app.state.rate_limiter = (
        RateLimiter(settings.rate_limit_per_minute) if settings.rate_limit_per_minute else None
    )
    app.add_middleware(
        BodyLimitMiddleware,
        limit_for=lambda path: (
            settings.max_body_bytes if UPLOAD_PATH.match(path) else settings.max_json_body_bytes
        ),
        read_timeout=settings.body_timeout_seconds,
        deadline=settings.body_deadline_seconds,
    )
    app.add_middleware(AnonymousReadCache)  # readers without a key: answers kept 0.5 s
    install_error_handlers(app)
    install_observability(app)  # ids, metrics and access lines for every answer
    app.add_middleware(  # outermost: refusals without a key cost the least they can
        AnonymousLimitMiddleware,
        per_minute=settings.anonymous_rate_limit_per_minute,
        per_second=settings.anonymous_requests_per_second,
    )
    install_openapi_constraints(app)
    # Routes are matched in this order: the queries first, the most frequent requests
    # (no other router's paths start with /grids or /queries).
    for router in (
        queries_router,
        health_router,
        keys_router,
        datasets_router,
        uploads_router,
        ledger_router,
        plans_router,
        releases_router,
        public_releases_router,
    ):
        app.include_router(router)
    install_pages(app)
    return app


def create_server_app() -> FastAPI:
    """The factory ``dpgate serve`` and ``dpgate demo`` give uvicorn (one per process)."""
    return create_app(freeze_gc=True)
