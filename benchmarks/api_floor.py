"""The floor of ``benchmarks/api.py``: a minimal FastAPI application that does one INSERT per
request through a psycopg async pool (autocommit, as dpgate's query pool) and answers a small
JSON body. Served by the same uvicorn, with the same workers and options as ``dpgate serve``;
what no DP service can beat on this machine.

    DPGATE_FLOOR_DSN=postgresql://... uvicorn --factory benchmarks.api_floor:create_app
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import orjson
from fastapi import FastAPI, Request, Response
from psycopg_pool import AsyncConnectionPool

ROOT = Path(__file__).resolve().parents[1]
DSN_ENV = "DPGATE_FLOOR_DSN"
TABLE = "api_floor"
CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial PRIMARY KEY, grid text NOT NULL, "
    "epsilon double precision NOT NULL, at timestamptz NOT NULL DEFAULT now())"
)
INSERT = f"INSERT INTO {TABLE} (grid, epsilon) VALUES (%s, %s) RETURNING id"


def create_app() -> FastAPI:
    pool = AsyncConnectionPool(
        os.environ[DSN_ENV], min_size=1, max_size=10, kwargs={"autocommit": True}, open=False
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pool.open()
        yield
        await pool.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/floor/{grid}")
    async def floor(grid: str, epsilon: float, request: Request) -> Response:
        async with pool.connection() as conn:
            cur = await conn.execute(INSERT, (grid, epsilon))
            row = await cur.fetchone()
        body = {"grid": grid, "epsilon": epsilon, "id": row[0] if row else None}
        return Response(orjson.dumps(body), media_type="application/json")

    return app


def start_floor(dsn: str, port: int, workers: int, log: Path) -> subprocess.Popen:
    """``uvicorn`` serving :func:`create_app` as ``dpgate serve`` serves dpgate."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CREATE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "benchmarks.api_floor:create_app",
         "--port", str(port), "--workers", str(workers), "--log-level", "warning",
         "--no-access-log", "--timeout-keep-alive", "5"],
        env={**os.environ, DSN_ENV: dsn, "PYTHONPATH": str(ROOT)},
        cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"floor server exited:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/floor/x?epsilon=1", timeout=1).is_success:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"floor server did not start:\n{log.read_text()[-2000:]}")
