"""The ``dpgate`` command: serve, migrate, keys, budget, demo, experiments."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from app import __version__
from app.config import Settings, get_settings


class StartupRefused(Exception):
    """A setting or the database forbids starting; the message says which variable."""


def _settings() -> Settings:
    from pydantic import ValidationError

    try:
        return get_settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"DPGATE_{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise StartupRefused(f"invalid settings: {problems}") from None


def _log_config(level: str = "info") -> dict[str, Any]:
    """Log lines in ``DPGATE_LOG_FORMAT`` from now on (migrations included)."""
    from app.observability.logs import configure_logging

    return configure_logging(_settings().log_format, level)


@contextmanager
def _metrics_directory(workers: int) -> Iterator[None]:
    """With several workers, a fresh directory where each keeps its metrics (so a scrape
    of any worker reports them all), removed at exit; an operator's own
    ``PROMETHEUS_MULTIPROC_DIR`` is used as it is."""
    from app.observability.metrics import MULTIPROC_ENV

    if workers <= 1 or os.environ.get(MULTIPROC_ENV):
        yield
        return
    path = tempfile.mkdtemp(prefix="dpgate-metrics-")
    os.environ[MULTIPROC_ENV] = path  # read by every worker as it imports the client library
    try:
        yield
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


def _prepared_settings() -> Settings:
    """Valid settings, the database migrated, and its hashing secret the pinned one."""
    from app.db.migrate import upgrade
    from app.instance.service import SecretMismatch, check_hashing_secret

    settings = _settings()
    upgrade(settings.database_url)
    try:
        check_hashing_secret(settings)
    except SecretMismatch as exc:
        raise StartupRefused(str(exc)) from None
    return settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    log_config = _log_config(args.log_level)
    with _metrics_directory(args.workers):
        _prepared_settings()
        uvicorn.run(
            "app.main:create_server_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_config=log_config,
            log_level=args.log_level,
            access_log=False,  # dpgate.access writes one line per request, with its id
            timeout_keep_alive=5,
        )
    return 0


def _migrate(_: argparse.Namespace) -> int:
    _log_config()
    _prepared_settings()
    print("database is at the newest revision")
    return 0


@contextmanager
def _admin_session() -> Iterator[Any]:
    """A transaction on the migrated database of ``DPGATE_DATABASE_URL``."""
    from app.db.engine import make_engine, make_sessionmaker
    from app.db.migrate import upgrade

    settings = _settings()
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    try:
        with make_sessionmaker(engine).begin() as session:
            yield session
    finally:
        engine.dispose()


def _keys_create(args: argparse.Namespace) -> int:
    from app.keys.service import create_key

    with _admin_session() as session:
        key, secret = create_key(
            session, name=args.name, role=args.role, epsilon_quota=args.epsilon_quota
        )
        print(f"created {key.role} key {key.id} ({key.name}):")
    print(secret)
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    from functools import partial

    from app.keys.service import list_keys
    from app.ledger.service import key_spent

    with _admin_session() as session:
        keys = list_keys(session, partial(key_spent, session))
    if args.json:
        import orjson

        print(orjson.dumps({"keys": [k.model_dump() for k in keys]}).decode())
        return 0
    print(f"{'id':>5}  {'role':<8} {'state':<8} {'quota':>10} {'spent':>12}  {'prefix':<12} name")
    for k in keys:
        quota = "-" if k.epsilon_quota is None else f"{k.epsilon_quota:g}"
        state = "revoked" if k.revoked else "active"
        print(
            f"{k.id:>5}  {k.role:<8} {state:<8} {quota:>10} {k.epsilon_spent:>12.6g}  "
            f"{k.prefix:<12} {k.name}"
        )
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    from app.errors import DPGateError
    from app.keys.service import revoke_key

    try:
        with _admin_session() as session:
            revoke_key(session, args.id)
    except DPGateError as exc:
        print(f"dpgate keys revoke: {exc.message}", file=sys.stderr)
        return 1
    print(f"revoked key {args.id}: every server process refuses it within 1 s")
    return 0


def _budget_reset(args: argparse.Namespace) -> int:
    import httpx

    import dpgate

    if not args.key:
        print("dpgate budget reset: give an admin key (--key or DPGATE_API_KEY)", file=sys.stderr)
        return 2
    try:
        with dpgate.Client(args.url, args.key) as client:
            epoch = client.reset_budget(args.dataset, args.reason)
    except (dpgate.DpgateError, httpx.HTTPError) as exc:
        print(f"dpgate budget reset: {exc}", file=sys.stderr)
        return 1
    print(f"dataset {args.dataset}: budget epoch {epoch} opened")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from app.demo import run_demo

    return run_demo(host=args.host, port=args.port, data=args.data)


RESEARCH_HINT = "dpgate experiments needs the research extra: pip install -e '.[research]'"


def _experiments(args: argparse.Namespace) -> int:
    try:
        from research.runner import run_from_args
    except ImportError:
        print(RESEARCH_HINT, file=sys.stderr)
        return 2
    return run_from_args(args)  # says itself when the extra's libraries are missing


def _add_experiments(sub: argparse._SubParsersAction) -> None:
    """``dpgate experiments``: the ``research`` package's own options, imported lazily
    (its heavy libraries load only when an experiment runs)."""
    exp = sub.add_parser(
        "experiments",
        help="reproduce the seed papers' figures and the peers comparison (research extra)",
        description="Run one experiment (or all) and write PNG figures and markdown tables. "
        "Needs pip install -e '.[research]'; the same as python -m research.",
    )
    try:
        from research.runner import build_parser as experiments_parser
    except ImportError:  # a runtime-only install without the research package
        exp.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    else:
        experiments_parser(exp)
    exp.set_defaults(func=_experiments)


HELP = argparse.ArgumentDefaultsHelpFormatter
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def _add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve",
        help="migrate the database, then serve the API",
        description="Bring the database of DPGATE_DATABASE_URL to the newest schema "
        "revision, check its hashing secret, then serve the API with uvicorn. Log lines "
        "follow DPGATE_LOG_FORMAT (json or text).",
        formatter_class=HELP,
    )
    serve.add_argument(
        "--host",
        default=os.environ.get("DPGATE_HOST", "127.0.0.1"),
        help="address to listen on (DPGATE_HOST)",
    )
    serve.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("DPGATE_PORT", "8000")),
        help="port to listen on (DPGATE_PORT)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes (each with its own pools; metrics are summed over all)",
    )
    serve.add_argument(
        "--log-level", default="info", choices=LOG_LEVELS, help="least severe level logged"
    )
    serve.set_defaults(func=_serve)


def _add_keys(sub: argparse._SubParsersAction) -> None:
    keys = sub.add_parser(
        "keys",
        help="create, list and revoke API keys",
        description="Manage API keys directly in the database of DPGATE_DATABASE_URL "
        "(migrated first).",
    ).add_subparsers(dest="keys", required=True, metavar="{create,list,revoke}")
    create = keys.add_parser(
        "create",
        help="create a key and print it (shown once)",
        description="Create a key and print its secret: it is shown once, only its hash is stored.",
        formatter_class=HELP,
    )
    create.add_argument(
        "--role", choices=("admin", "analyst"), required=True, help="what the key may do"
    )
    create.add_argument("--name", required=True, help="who or what the key is for")
    create.add_argument(
        "--epsilon-quota",
        type=float,
        default=None,
        help="most epsilon the key may spend in total (default: no quota)",
    )
    create.set_defaults(func=_keys_create)
    listing = keys.add_parser(
        "list",
        help="list every key with its role, quota, spend and state",
        description="Every key (never its secret): id, role, active or revoked, quota, "
        "epsilon spent, the secret's first characters and name.",
        formatter_class=HELP,
    )
    listing.add_argument(
        "--json", action="store_true", help="print GET /keys's JSON answer instead of a table"
    )
    listing.set_defaults(func=_keys_list)
    revoke = keys.add_parser(
        "revoke",
        help="revoke a key by id",
        description="Revoke a key: every server process refuses it (401) within 1 s. "
        "The last active admin key is kept (create another one first).",
        formatter_class=HELP,
    )
    revoke.add_argument("id", type=int, help="the key's id (dpgate keys list)")
    revoke.set_defaults(func=_keys_revoke)


def _add_budget(sub: argparse._SubParsersAction) -> None:
    budget = sub.add_parser(
        "budget", help="manage a dataset's privacy budget through a running server"
    ).add_subparsers(dest="budget", required=True, metavar="{reset}")
    reset = budget.add_parser(
        "reset",
        help="open a new budget epoch of a dataset (POST /datasets/{id}/budget/reset)",
        description="Ask a running server to open a new budget epoch of a dataset: every "
        "user's spend starts again from 0; the old entries are kept, and the reset is "
        "recorded with the admin key and the reason. Retried safely (Idempotency-Key).",
        formatter_class=HELP,
    )
    reset.add_argument("--dataset", type=int, required=True, help="the dataset's id")
    reset.add_argument(
        "--reason", required=True, help="why (recorded with the reset, for the audit)"
    )
    reset.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL")
    reset.add_argument(
        "--key",
        default=os.environ.get("DPGATE_API_KEY"),
        help="an admin key (default: the DPGATE_API_KEY variable, which keeps it out of "
        "the shell's history)",
    )
    reset.set_defaults(func=_budget_reset)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        help="load a demo dataset into the database, print keys and curl commands, serve",
        description="Load a synthetic ITMS-like city (or a CapMetrics day with --data) into "
        "the database of DPGATE_DATABASE_URL (default ./dpgate.db), create an admin and an "
        "analyst key, print them with ready-to-paste curl commands, and serve. Running it "
        "again in the same directory reuses the loaded dataset.",
        formatter_class=HELP,
    )
    demo.add_argument("--host", default="127.0.0.1", help="address to listen on")
    demo.add_argument("--port", type=int, default=8000, help="port to listen on")
    demo.add_argument(
        "--data",
        default=None,
        help="a CapMetrics CSV (vehicle_id,timestamp,speed,...,latitude,longitude) to load "
        "instead: U = 30 m/s, America/Chicago, zero speeds dropped (default: the synthetic "
        "city)",
    )
    demo.set_defaults(func=_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpgate", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"dpgate {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    sub.add_parser(
        "migrate",
        help="bring the database to the newest revision",
        description="Bring the database of DPGATE_DATABASE_URL to the newest schema "
        "revision (and pin its hashing secret), without serving.",
    ).set_defaults(func=_migrate)
    _add_keys(sub)
    _add_budget(sub)
    _add_demo(sub)
    _add_experiments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except StartupRefused as exc:
        message = f"dpgate: refusing to start: {exc}"
        if logging.getLogger().handlers:  # configured: the line in DPGATE_LOG_FORMAT
            logging.getLogger("dpgate.cli").error(message)
        else:
            print(message, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
