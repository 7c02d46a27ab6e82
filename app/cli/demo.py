"""``dpgate demo``: a dataset, two keys and a running server on the embedded database.

It migrates; finds its dataset by name or creates and loads it in one transaction through the
service layer (a synthetic city, or ``--data`` a CapMetrics day); issues fresh admin and analyst
keys (revoking earlier runs'); prints them with ready ``curl`` commands and serves."""

from __future__ import annotations

import io
import shlex
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from app.config import Settings, get_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.datasets.models import Dataset
    from app.datasets.schemas import DatasetCreate
    from app.uploads.service import UploadOptions

__all__ = ["DemoSetup", "demo_commands", "port_problem", "prepare_demo", "run_demo"]

SYNTH_NAME = "demo: synthetic ITMS-like city (seed 0)"
SYNTH_SEED = 0
CAPMETRICS_U = 30.0
CAPMETRICS_ZONE = "America/Chicago"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class DemoSetup:
    """What the demo prints: the dataset, its busiest grid and the two new keys."""

    dataset_id: int
    dataset_name: str
    grid_id: str
    grid_users: int
    grid_records: int
    n_grids: int
    n_records: int
    admin_key: str
    analyst_key: str
    reused: bool
    upload: dict[str, object] | None


def _chunks(source: BinaryIO) -> Iterator[bytes]:
    with source:
        while chunk := source.read(_CHUNK):
            yield chunk


def _dataset_spec(
    data: Path | None,
) -> tuple[DatasetCreate, UploadOptions, Callable[[], Iterator[bytes]]]:
    """The dataset to create, the upload options and a factory of the CSV's byte chunks."""
    from app.datasets.schemas import DatasetCreate
    from app.ingest.csv_records import ColumnMap
    from app.uploads.service import UploadOptions

    # both: H3 resolution 8 and hourly slots (the defaults), 10 epsilon per user
    if data is None:
        spec = DatasetCreate(
            name=SYNTH_NAME,
            value_bound=65.0,
            timezone="Asia/Kolkata",
            budget_per_user=10.0,
            value_unit="km/h",  # ITMS-like speeds
        )

        def chunks() -> Iterator[bytes]:
            from app.cli.demo_city import synthetic_city_csv

            return _chunks(io.BytesIO(synthetic_city_csv(SYNTH_SEED).encode()))

        return spec, UploadOptions(), chunks
    spec = DatasetCreate(
        name=f"demo: CapMetrics {data.name}",
        value_bound=CAPMETRICS_U,
        timezone=CAPMETRICS_ZONE,
        budget_per_user=10.0,
        value_filters_public=True,  # zero speeds are dropped (SECURITY.md: value filters)
        value_unit="m/s",  # GTFS-Realtime's position.speed
    )
    options = UploadOptions(
        columns=ColumnMap("vehicle_id", "timestamp", "latitude", "longitude", "speed"),
        drop_zero=True,
    )
    return spec, options, lambda: _chunks(data.open("rb"))


def _busiest_grid(session: Session, dataset: Dataset) -> tuple[str, int, int, int]:
    """``(grid_id, n_users, n_records, n_grids)`` of the grid with the most records."""
    from app.datasets import service

    grids = list(service.all_grids(session, dataset))
    if not grids:
        raise RuntimeError("the demo dataset has no grid")
    best = max(grids, key=lambda g: (g.n_records, g.n_users))  # the first of ties
    return best.grid_id, best.n_users, best.n_records, len(grids)


DEMO_KEY_NAMES = {"admin": "demo admin", "analyst": "demo analyst"}


def _fresh_demo_keys(session: Session) -> tuple[str, str]:
    """A new admin and analyst key; earlier demo runs' keys are revoked."""
    from app.keys.repository import KeyRepository
    from app.keys.service import create_key, revoke_key

    earlier = [
        k.id
        for k in KeyRepository(session).list_all()
        if k.revoked_at is None and DEMO_KEY_NAMES.get(k.role) == k.name
    ]
    created = {role: create_key(session, name=name, role=role)[1] for role, name in
               DEMO_KEY_NAMES.items()}  # fmt: skip
    for key_id in earlier:
        revoke_key(session, key_id)
    return created["admin"], created["analyst"]


def prepare_demo(settings: Settings, data: str | Path | None = None) -> DemoSetup:
    """Migrate, load (or reuse) the demo dataset and create an admin and an analyst key."""
    from app.cli.support import migrated_engine
    from app.datasets import service
    from app.db.engine import make_sessionmaker
    from app.instance.service import resolve_hashing_secret
    from app.uploads.service import upload_records

    path = None if data is None else Path(data)
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"no such data file: {path}")
    spec, options, chunks = _dataset_spec(path)
    with migrated_engine(settings, export=True) as engine:
        secret = resolve_hashing_secret(settings, engine)
        sessions = make_sessionmaker(engine)
        upload: dict[str, object] | None = None
        with sessions.begin() as session:
            existing = [d for d in service.list_datasets(session) if d.name == spec.name]
            dataset = existing[0] if existing else None
            reused = dataset is not None and service.dataset_detail(session, dataset).n_records > 0
            if dataset is None:
                dataset = service.create_dataset(session, spec)
            if not reused:
                upload, _ = upload_records(
                    session, dataset.id, chunks(), options, hash_secret=secret
                )
            dataset_id, name = dataset.id, dataset.name
        with sessions.begin() as session:
            dataset = service.get_dataset(session, dataset_id)
            grid_id, grid_users, grid_records, n_grids = _busiest_grid(session, dataset)
            n_records = service.dataset_detail(session, dataset).n_records
            admin, analyst = _fresh_demo_keys(session)
    return DemoSetup(
        dataset_id=dataset_id,
        dataset_name=name,
        grid_id=grid_id,
        grid_users=grid_users,
        grid_records=grid_records,
        n_grids=n_grids,
        n_records=n_records,
        admin_key=admin,
        analyst_key=analyst,
        reused=reused,
        upload=upload,
    )


def demo_commands(base_url: str, setup: DemoSetup) -> list[str]:
    """Three ``curl`` commands with the analyst key: grids, a DP mean, the budget."""
    auth = shlex.quote(f"Authorization: Bearer {setup.analyst_key}")
    urls = [
        f"{base_url}/datasets/{setup.dataset_id}/grids?limit=5",
        f"{base_url}/grids/{setup.grid_id}/mean?epsilon=1&mechanism=auto",
        f"{base_url}/datasets/{setup.dataset_id}/budget",
    ]
    return [f"curl -s -H {auth} {shlex.quote(u)}" for u in urls]


def _banner(setup: DemoSetup, base_url: str) -> str:
    loaded = (
        "reused from an earlier run"
        if setup.reused
        else f"loaded now: {setup.upload.get('accepted') if setup.upload else 0} records accepted"
    )
    lines = [
        f"dpgate demo — dataset {setup.dataset_id} {setup.dataset_name!r} ({loaded})",
        f"  {setup.n_records} records in {setup.n_grids} grids (H3 cell x hour); busiest grid "
        f"{setup.grid_id}: {setup.grid_users} users, {setup.grid_records} records",
        "",
        f"admin key:   {setup.admin_key}",
        f"analyst key: {setup.analyst_key}",
        "",
        "Try (analyst key):",
        *demo_commands(base_url, setup),
        "",
        f"API docs: {base_url}/docs   (Ctrl-C stops the server)",
    ]
    return "\n".join(lines)


def bind_listener(host: str, port: int) -> socket.socket | str:
    """A socket listening on ``host:port`` as uvicorn opens it, or why not."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OverflowError) as exc:
        return f"cannot resolve host {host!r}: {exc}"
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return sock


def port_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host:port`` (None when it can)."""
    listener = bind_listener(host, port)
    if isinstance(listener, str):
        return listener
    listener.close()
    return None


def run_demo(*, host: str, port: int, data: str | None) -> int:
    """``dpgate demo``: prepare, print keys and curl commands, then serve (blocks). When the port
    cannot be had, only the reason is printed (exit 2)."""
    import uvicorn

    from app.observability.logs import logging_config

    listener = bind_listener(host, port)
    if isinstance(listener, str):
        print(
            f"dpgate demo: {listener}. Is another server running there? "
            "Choose another port with --port.",
            file=sys.stderr,
        )
        return 2
    with listener:
        settings = get_settings()
        setup = prepare_demo(settings, data)
        shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104
        base = f"http://{shown}:{port}"
        print(_banner(setup, base), flush=True)
        config = uvicorn.Config(
            "app.main:create_server_app",
            factory=True,
            host=host,
            port=port,
            log_config=logging_config(settings.log_format, "warning"),
            log_level="warning",
            access_log=False,
        )
        with suppress(KeyboardInterrupt):  # re-raised after a graceful stop, as `serve`
            uvicorn.Server(config).run(sockets=[listener])
    return 0
