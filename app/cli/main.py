"""The ``dpgate`` command. Every command ends quietly on SIGINT or SIGTERM (exit 128 + the signal)
and refuses bad arguments with exit 2 (``app.cli.support``)."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from app import __version__
from app.cli.admin import add_budget, add_keys
from app.cli.ingest import add_ingest
from app.cli.publish import add_publish
from app.cli.support import (
    EXIT_CODES,
    EXIT_USAGE,
    LOG_LEVELS,
    CommandFailed,
    DefaultsHelp,
    StartupRefused,
    integer,
    migrated_engine,
    settings_or_refusal,
)
from app.config import Settings


def _log_config(level: str = "info") -> dict[str, Any]:
    """Log lines in ``DPGATE_LOG_FORMAT`` from now on (migrations included)."""
    from app.observability.logs import configure_logging

    return configure_logging(settings_or_refusal().log_format, level)


@contextmanager
def _metrics_directory(workers: int) -> Iterator[None]:
    """With several workers, a fresh metrics directory, removed at exit."""
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


def _migrated_settings() -> Settings:
    """Valid settings, the database migrated, and its hashing secret the pinned one."""
    from app.instance.service import SecretMismatch, resolve_hashing_secret

    settings = settings_or_refusal()
    with migrated_engine(settings, export=True) as engine:
        try:
            resolve_hashing_secret(settings, engine)
        except SecretMismatch as exc:
            raise StartupRefused(str(exc)) from None
    return settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.cli.demo import port_problem

    if (problem := port_problem(args.host, args.port)) is not None:
        raise CommandFailed(EXIT_USAGE, f"{problem}: choose another --host or --port")
    log_config = _log_config(args.log_level)
    with _metrics_directory(args.workers):
        _migrated_settings()
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
    _migrated_settings()
    print("database is at the newest revision")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from app.cli.demo import run_demo

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
    """``dpgate experiments``: the ``research`` package's options, imported lazily."""
    exp = sub.add_parser(
        "experiments",
        help="reproduce the seed papers' figures (the research extra)",
        description="Run one experiment (or all) and write PNG figures and markdown tables. "
        "Needs pip install -e '.[research]'; the same as python -m research.",
        formatter_class=DefaultsHelp,
    )
    try:
        from research.runner import build_parser as experiments_parser
    except ImportError:  # a runtime-only install without the research package
        exp.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    else:
        experiments_parser(exp)
    exp.set_defaults(func=_experiments)


def _add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve",
        help="migrate the database, then serve the API",
        description="Bring the database of DPGATE_DATABASE_URL to the newest schema "
        "revision, check its hashing secret, then serve the API with uvicorn. Log lines "
        "follow DPGATE_LOG_FORMAT (json or text).",
        formatter_class=DefaultsHelp,
    )
    serve.add_argument(
        "--host",
        default=os.environ.get("DPGATE_HOST", "127.0.0.1"),
        help="address to listen on (DPGATE_HOST)",
    )
    serve.add_argument(
        "--port",
        type=integer(0, 65535),
        default=os.environ.get("DPGATE_PORT", "8000"),  # parsed (and checked) by the type
        help="port to listen on (DPGATE_PORT)",
    )
    serve.add_argument(
        "--workers",
        type=integer(1, 256),
        default=1,
        help="server processes (each with its own pools; metrics are summed over all)",
    )
    serve.add_argument(
        "--log-level", default="info", choices=LOG_LEVELS, help="least severe level logged"
    )
    serve.set_defaults(func=_serve)


def _data_file(text: str) -> str:
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


def _add_demo(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        help="load a demo dataset, print keys and curl commands, serve",
        description="Load a synthetic ITMS-like city (or a CapMetrics day with --data) into "
        "the database of DPGATE_DATABASE_URL (default: an embedded Postgres in "
        "./dpgate-postgres), create an admin and an "
        "analyst key, print them with ready-to-paste curl commands, and serve. Running it "
        "again in the same directory reuses the loaded dataset.",
        formatter_class=DefaultsHelp,
    )
    demo.add_argument("--host", default="127.0.0.1", help="address to listen on")
    demo.add_argument("--port", type=integer(0, 65535), default=8000, help="port to listen on")
    demo.add_argument(
        "--data",
        type=_data_file,
        default=None,
        help="a CapMetrics CSV (vehicle_id,timestamp,speed,...,latitude,longitude) to load "
        "instead: U = 30 m/s, America/Chicago, zero speeds dropped (default: the synthetic "
        "city)",
    )
    demo.set_defaults(func=_demo)


class _OneLineCommands(argparse.HelpFormatter):
    """Each command's help on its own line beside its name (``dpgate --help``)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=18)

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._SubParsersAction._ChoicesPseudoAction):
            return f"  {action.metavar or action.dest:<14}{action.help}\n"
        return super()._format_action(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpgate",
        description="dpgate: user-level differentially private statistics over "
        "spatio-temporal IoT data, with a privacy-budget ledger. Commands that talk to a "
        "server (budget, publish) take --url and --key, or DPGATE_URL and DPGATE_KEY; the "
        "others use the database of DPGATE_DATABASE_URL.",
        epilog=EXIT_CODES + "; 130 or 143 stopped by SIGINT or SIGTERM (a server, which "
        "stops gracefully, 0).",
        formatter_class=_OneLineCommands,
    )
    parser.add_argument(
        "--version", action="version", version=f"dpgate {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    sub.add_parser(
        "migrate",
        help="bring the database to the newest revision",
        description="Bring the database of DPGATE_DATABASE_URL to the newest schema "
        "revision (and pin its hashing secret), without serving.",
    ).set_defaults(func=_migrate)
    add_keys(sub)
    add_budget(sub)
    add_ingest(sub)
    add_publish(sub)
    _add_demo(sub)
    _add_experiments(sub)
    return parser


class Stopped(KeyboardInterrupt):
    """SIGTERM, raised where the command is, as SIGINT raises ``KeyboardInterrupt`` (a
    server, which stops gracefully on either, then exits 0)."""


def _terminate(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def main(argv: Sequence[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        args = build_parser().parse_args(argv)
        return _run(args)
    except Stopped:
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:  # SIGINT (Ctrl-C): the command stops, quietly
        return 128 + signal.SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except CommandFailed as exc:
        print(f"dpgate {args.command}: {exc.message}", file=sys.stderr)
        return exc.code
    except StartupRefused as exc:
        message = f"dpgate: refusing to start: {exc}"
        if logging.getLogger().handlers:  # configured: the line in DPGATE_LOG_FORMAT
            logging.getLogger("dpgate.cli").error(message)
        else:
            print(message, file=sys.stderr)
        return EXIT_USAGE


def run() -> None:
    """The ``dpgate`` program: :func:`main`, then exit (frozen first: a fast exit)."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
