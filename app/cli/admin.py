"""``dpgate keys create|list|revoke`` (on the database) and ``dpgate budget reset`` (through
a running server, so the reset is recorded with an admin key)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.cli.support import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    CommandFailed,
    DefaultsHelp,
    add_server_options,
    integer,
    migrated_engine,
    number,
    server,
    settings_or_refusal,
    text,
)


@contextmanager
def _admin_session() -> Iterator[Any]:
    """A transaction on the migrated database (:func:`migrated_engine`)."""
    from app.db.engine import make_sessionmaker

    with migrated_engine(settings_or_refusal()) as engine, make_sessionmaker(engine).begin() as s:
        yield s


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
    from app.keys.service import revoke_key
    from app.kit.errors import DPGateError, NotFound

    try:
        with _admin_session() as session:
            revoke_key(session, args.id)
    except DPGateError as exc:
        raise CommandFailed(
            EXIT_NOT_FOUND if isinstance(exc, NotFound) else EXIT_FAILED, exc.message
        ) from None
    print(f"revoked key {args.id}: every server process refuses it within 1 s")
    return 0


def _budget_reset(args: argparse.Namespace) -> int:
    with server(args) as client:
        epoch = client.reset_budget(args.dataset, args.reason)
    print(f"dataset {args.dataset}: budget epoch {epoch} opened")
    return 0


def add_keys(sub: argparse._SubParsersAction) -> None:
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
        formatter_class=DefaultsHelp,
    )
    create.add_argument(
        "--role",
        choices=("admin", "analyst", "viewer"),
        required=True,
        help="what the key may do (a viewer reads everything and never spends)",
    )
    create.add_argument("--name", type=text(200), required=True, help="who or what the key is for")
    create.add_argument(
        "--epsilon-quota",
        type=number(0, 1e6, above=True),
        default=None,
        help="most epsilon the key may spend in total (default: no quota)",
    )
    create.set_defaults(func=_keys_create)
    listing = keys.add_parser(
        "list",
        help="list every key with its role, quota, spend and state",
        description="Every key (never its secret): id, role, active or revoked, quota, "
        "epsilon spent, the secret's first characters and name.",
        formatter_class=DefaultsHelp,
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
        formatter_class=DefaultsHelp,
    )
    revoke.add_argument("id", type=integer(1), help="the key's id (dpgate keys list)")
    revoke.set_defaults(func=_keys_revoke)


def add_budget(sub: argparse._SubParsersAction) -> None:
    budget = sub.add_parser(
        "budget", help="manage a dataset's privacy budget through a running server"
    ).add_subparsers(dest="budget", required=True, metavar="{reset}")
    reset = budget.add_parser(
        "reset",
        help="open a new budget epoch of a dataset (POST /datasets/{id}/budget/reset)",
        description="Ask a running server to open a new budget epoch of a dataset: every "
        "user's spend starts again from 0; the old entries are kept, and the reset is "
        "recorded with the admin key and the reason. Retried safely (Idempotency-Key). "
        + EXIT_CODES,
        formatter_class=DefaultsHelp,
    )
    reset.add_argument("--dataset", type=integer(1), required=True, help="the dataset's id")
    reset.add_argument(
        "--reason", type=text(2000), required=True, help="why (recorded with the reset)"
    )
    add_server_options(reset, "admin")
    reset.set_defaults(func=_budget_reset)
