"""Private Postgres servers for the security tests that stop, restart or load a server.

They never touch the shared test server at 127.0.0.1:5432: each is a throwaway
``pgserver`` (Postgres binaries from pip) in a temporary directory, on a Unix socket.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url


@dataclass
class PrivatePostgres:
    url: str  # SQLAlchemy URL (postgresql+psycopg, Unix socket)
    pgdata: Path
    socket_dir: Path
    user: str | None  # the system user pgserver runs postgres as (when we are root)

    def _pg_ctl(self, *args: str, timeout: float = 60) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(list(args), pgdata=self.pgdata, user=self.user, timeout=timeout)

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: open sessions are cut, the server goes down."""
        self._pg_ctl("-w", "-m", "fast", "stop")

    def start(self) -> None:
        """Start it again on the same socket (pgserver's own start options)."""
        self._pg_ctl(
            "-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.pgdata / "log"),
            "start",
        )  # fmt: skip

    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists()


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver
            from pgserver.utils import PostmasterInfo
    except ImportError:
        pytest.fail("the 'pgserver' package is required (pip install -e '.[dev]')")
    pgdata = Path(tempfile.mkdtemp(prefix="dpg-sec-pg-"))
    with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set"
        warnings.simplefilter("ignore")
        server = pgserver.get_server(pgdata, cleanup_mode="delete")
    info = server.get_postmaster_info()
    url = make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    pg = PrivatePostgres(
        url=url.render_as_string(hide_password=False),
        pgdata=pgdata,
        socket_dir=Path(info.socket_dir),
        user=server.system_user if os.name == "posix" and os.geteuid() == 0 else None,
    )
    try:
        yield pg
    finally:
        # a restart leaves pgserver's handle pointing at the old process: stop it ourselves
        with suppress(Exception):
            if pg.running():
                pg.stop()
        server._postmaster_info = PostmasterInfo.read_from_pgdata(pgdata)
        with suppress(Exception):
            server.cleanup()
