"""The embedded Postgres when ``DPGATE_DATABASE_URL`` is unset: a private ``pgserver`` in
``./dpgate-postgres``, on a Unix socket only, stopped when its process exits; otherwise the
production code path."""

from __future__ import annotations

import atexit
import functools
import os
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path

from sqlalchemy.engine import make_url

DATA_DIR = "dpgate-postgres"
URL_VARIABLE = "DPGATE_DATABASE_URL"


def database_url(configured: str | None) -> str:
    """``configured`` (``DPGATE_DATABASE_URL``), else the embedded server's URL."""
    return configured if configured is not None else embedded_url()


#: Tries to start the server: pgserver's ``pg_ctl start`` waits at most 10 s, which a
#: heavily loaded machine can exceed while the server itself comes up fine.
START_ATTEMPTS = 3


@functools.cache
def embedded_url(data_dir: str = DATA_DIR) -> str:
    """Start (or join) the embedded server on ``data_dir``; its SQLAlchemy URL."""
    with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set" (harmless)
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        import pgserver

    path = Path(data_dir).resolve()
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            server = pgserver.get_server(path, cleanup_mode="stop")
            break
        except subprocess.TimeoutExpired:
            # pgserver keeps the half-made handle (and its exit hook): drop both, then
            # join the server, which is usually up by now, on the next attempt.
            stale = pgserver.PostgresServer._instances.pop(path, None)
            if stale is not None:
                atexit.unregister(stale._cleanup)
            if attempt == START_ATTEMPTS:
                raise
    _exit_on_sigterm()
    url = make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def _exit_on_sigterm() -> None:
    """Make SIGTERM a normal exit, so the hook that stops the server runs."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def export_database_url(configured: str | None) -> str:
    """:func:`database_url`, also put in the environment so that server processes
    started from this one (uvicorn's workers) use the same server."""
    url = database_url(configured)
    os.environ[URL_VARIABLE] = url
    return url
