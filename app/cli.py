"""The ``dpgate`` command: serve, migrate, keys, demo, experiments."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from app.config import Settings, get_settings


class StartupRefused(Exception):
    """A setting or the database forbids starting; the message says which variable."""


def _prepared_settings() -> Settings:
    """Valid settings, the database migrated, and its hashing secret the pinned one."""
    from pydantic import ValidationError

    from app.db.embedded import export_database_url
    from app.db.migrate import upgrade
    from app.instance.service import SecretMismatch, check_hashing_secret

    try:
        settings = get_settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"DPGATE_{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise StartupRefused(f"invalid settings: {problems}") from None
    upgrade(export_database_url(settings.database_url))
    try:
        check_hashing_secret(settings)
    except SecretMismatch as exc:
        raise StartupRefused(str(exc)) from None
    return settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    _prepared_settings()
    uvicorn.run(
        "app.main:create_server_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        timeout_keep_alive=5,
    )
    return 0


def _migrate(_: argparse.Namespace) -> int:
    _prepared_settings()
    print("database is at the newest revision")
    return 0


def _keys_create(args: argparse.Namespace) -> int:
    from app.db.embedded import database_url
    from app.db.engine import make_engine, make_sessionmaker
    from app.db.migrate import upgrade
    from app.keys.service import create_key

    url = database_url(get_settings().database_url)
    upgrade(url)
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine).begin() as session:
            key, secret = create_key(
                session, name=args.name, role=args.role, epsilon_quota=args.epsilon_quota
            )
            print(f"created {key.role} key {key.id} ({key.name}):")
    finally:
        engine.dispose()
    print(secret)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="migrate the database, then serve the API")
    serve.add_argument("--host", default=os.environ.get("DPGATE_HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("DPGATE_PORT", "8000")))
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(func=_serve)

    sub.add_parser("migrate", help="bring the database to the newest revision").set_defaults(
        func=_migrate
    )

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys", required=True)
    create = keys.add_parser("create", help="create a key and print it (shown once)")
    create.add_argument("--role", choices=("admin", "analyst"), required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--epsilon-quota", type=float, default=None)
    create.set_defaults(func=_keys_create)

    demo = sub.add_parser(
        "demo",
        help="load a demo dataset into the database, print keys and curl commands, serve",
        description="Load a synthetic ITMS-like city (or a CapMetrics day with --data) into "
        "the database of DPGATE_DATABASE_URL (default: an embedded Postgres in "
        "./dpgate-postgres), create an admin and an "
        "analyst key, print them with ready-to-paste curl commands, and serve. Running it "
        "again in the same directory reuses the loaded dataset.",
    )
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8000)
    demo.add_argument(
        "--data",
        default=None,
        help="a CapMetrics CSV (vehicle_id,timestamp,speed,...,latitude,longitude) to load "
        "instead: U = 30 m/s, America/Chicago, zero speeds dropped",
    )
    demo.set_defaults(func=_demo)

    _add_experiments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except StartupRefused as exc:
        print(f"dpgate: refusing to start: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
