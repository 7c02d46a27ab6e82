"""What the ``dpgate`` command's modules share: the help format, settings, argument types that
refuse what cannot be meant (exit 2), and the server-talking commands' convention (``--url``,
``--key``, :data:`EXIT_CODES`)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from typing import TYPE_CHECKING

from app.config import Settings, get_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    import dpgate

EXIT_OK = 0
EXIT_FAILED = 1  # anything else: read the message
EXIT_USAGE = 2  # bad arguments, or a request the server refused as invalid (400)
EXIT_REFUSED = 3  # budget, quota, a key that may not: do not retry as is
EXIT_NOT_FOUND = 4  # no such dataset, release, key, or no data for that day yet
EXIT_UNAVAILABLE = 5  # the server unreachable or busy (after retries): retry later

EXIT_CODES = (
    "exit codes: 0 done; 1 other failure; 2 bad arguments or a request the server refused "
    "as invalid; 3 refused: budget, quota or the key's role (do not retry as is); 4 not "
    "found (no such dataset, or no data yet); 5 server unreachable or busy (retry later)"
)
LOCAL_URL = "http://127.0.0.1:8000"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
MAX_ID = 2**31 - 1


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Help that ends with each option's default, unless it is unset or the text says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False) or "default" in text:
            return text
        return super()._get_help_string(action) or text


class StartupRefused(Exception):
    """A setting or the database forbids starting; the message says which variable."""


class CommandFailed(Exception):
    """A command ends with ``code`` and prints ``message`` (``dpgate <command>: ...``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def settings_or_refusal() -> Settings:
    from pydantic import ValidationError

    try:
        return get_settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"DPGATE_{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise StartupRefused(f"invalid settings: {problems}") from None


@contextmanager
def migrated_engine(settings: Settings, *, export: bool = False) -> Iterator[Engine]:
    """An engine on the migrated database of ``DPGATE_DATABASE_URL`` (else the embedded one;
    with ``export``, named in the environment for the processes started from this one)."""
    from app.db.embedded import database_url, export_database_url
    from app.db.engine import make_engine
    from app.db.migrate import upgrade

    url = (export_database_url if export else database_url)(settings.database_url)
    upgrade(url)
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


# ---- argument types ------------------------------------------------------------------


def number(low: float, high: float, *, above: bool = False) -> Callable[[str], float]:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``above``)."""
    where = f"{'above' if above else 'at least'} {low:g} and at most {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low or value > high or (above and value == low):
            raise argparse.ArgumentTypeError(f"must be a finite number {where}, not {text}")
        return value

    return parse


def integer(low: int, high: int = MAX_ID) -> Callable[[str], int]:
    """A whole number in ``[low, high]``, in ASCII digits."""

    def parse(text: str) -> int:
        if not text.strip().lstrip("+-").isdigit() or not text.isascii():
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {text}")
        return value

    return parse


#: Days a command accepts: a day's neighbours must be dates too (a day's slots end on
#: the next day; a time zone east of UTC starts it on the day before).
FIRST_DAY, LAST_DAY = date(1970, 1, 1), date(9998, 12, 31)


def local_day(text: str) -> date:
    """A date ``YYYY-MM-DD`` from 1970-01-01 to 9998-12-31."""
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise argparse.ArgumentTypeError(f"must be from {FIRST_DAY} to {LAST_DAY}, not {text}")
    return day


def text(max_length: int) -> Callable[[str], str]:
    """Text that is not blank and at most ``max_length`` characters."""

    def parse(value: str) -> str:
        if not value.strip() or len(value) > max_length:
            raise argparse.ArgumentTypeError(f"must be 1 to {max_length} characters, not blank")
        return value

    return parse


# ---- commands that talk to a server --------------------------------------------------


def add_server_options(parser: argparse.ArgumentParser, role: str) -> None:
    """``--url`` and ``--key``, read from ``DPGATE_URL`` and ``DPGATE_KEY`` by default."""
    parser.add_argument(
        "--url",
        default=os.environ.get("DPGATE_URL") or LOCAL_URL,
        help=f"the server (env DPGATE_URL; default {LOCAL_URL})",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("DPGATE_KEY"),
        help=f"an {role} key (env DPGATE_KEY, which keeps it out of the shell's history)",
    )


@contextmanager
def server(args: argparse.Namespace, *, timeout: float = 60.0) -> Iterator[dpgate.Client]:
    """A client of ``args.url`` with ``args.key``; its errors become :class:`CommandFailed`
    with the exit code of their kind (a refusal 3, not found 4, unreachable or busy 5)."""
    import httpx

    import dpgate

    if not args.key:
        raise CommandFailed(EXIT_USAGE, "give a key: --key, or the DPGATE_KEY variable")
    try:
        with dpgate.Client(args.url, args.key, timeout=timeout) as client:
            yield client
    except (dpgate.BudgetExhausted, dpgate.Forbidden, dpgate.Unauthenticated) as exc:
        raise CommandFailed(EXIT_REFUSED, f"refused by {args.url}: {exc}") from None
    except dpgate.NotFound as exc:
        raise CommandFailed(EXIT_NOT_FOUND, str(exc)) from None
    except dpgate.InvalidRequest as exc:
        raise CommandFailed(EXIT_USAGE, f"the server refused the request: {exc}") from None
    except (dpgate.Unavailable, dpgate.RateLimited, dpgate.RequestTimeout) as exc:
        raise CommandFailed(EXIT_UNAVAILABLE, f"{args.url} is busy: {exc}; retry later") from None
    except dpgate.DpgateError as exc:
        raise CommandFailed(EXIT_FAILED, str(exc)) from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        raise CommandFailed(
            EXIT_USAGE, f"--url {args.url!r} is not an http(s) URL ({exc}); e.g. {LOCAL_URL}"
        ) from None
    except httpx.TransportError as exc:  # refused, reset, timed out
        reason = str(exc) or type(exc).__name__
        raise CommandFailed(EXIT_UNAVAILABLE, f"cannot reach {args.url}: {reason}") from None
