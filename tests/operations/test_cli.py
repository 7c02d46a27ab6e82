"""The ``dpgate`` command: help text and defaults everywhere, ``keys list`` and ``revoke``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator

import pytest

from app.cli.main import build_parser, main
from app.config import get_settings


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("dpgate",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_command_and_option_has_help() -> None:
    commands = dict(_parsers(build_parser()))
    assert {
        ("dpgate", "serve"),
        ("dpgate", "keys", "list"),
        ("dpgate", "keys", "revoke"),
        ("dpgate", "budget", "reset"),
    } <= set(commands)
    for path, parser in commands.items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert choice.help, (path, choice.dest)
            elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
                assert action.help and action.help != argparse.SUPPRESS, (path, action.dest)


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["serve"], ["(default: 8000)", "(default: 1)", "(default: info)", "DPGATE_HOST"]),
        (
            ["keys", "create"],
            ["--epsilon-quota", "(default: no quota)", "--role {admin,analyst,viewer}"],
        ),
        (["budget", "reset"], ["--reason", "default http://127.0.0.1:8000", "DPGATE_KEY"]),
        (["demo"], ["(default: 8000)", "--data"]),
    ],
)
def test_help_shows_defaults(
    argv: list[str], shown: list[str], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per option
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(s in out for s in shown), out


@pytest.fixture
def database_env(migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("DPGATE_DATABASE_URL", migrated_postgres_url)
    monkeypatch.setenv("DPGATE_SECRET_KEY", "test-secret")
    monkeypatch.delenv("DPGATE_ADMIN_KEY", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _listed(capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["keys", "list", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["keys"]


def test_keys_create_list_revoke(database_env: None, capsys) -> None:
    assert main(["keys", "create", "--role", "admin", "--name", "ops admin"]) == 0
    secret = capsys.readouterr().out.splitlines()[-1]
    assert (
        main(["keys", "create", "--role", "analyst", "--name", "ana", "--epsilon-quota", "2"]) == 0
    )
    keys = _listed(capsys)
    assert [(k["name"], k["role"], k["epsilon_quota"], k["revoked"]) for k in keys] == [
        ("ops admin", "admin", None, False),
        ("ana", "analyst", 2.0, False),
    ]
    assert all(secret not in json.dumps(k) for k in keys)  # never the secret
    assert main(["keys", "list"]) == 0
    table = capsys.readouterr().out
    assert "ana" in table and "active" in table and secret not in table

    admin_id, analyst_id = keys[0]["id"], keys[1]["id"]
    assert main(["keys", "revoke", str(analyst_id)]) == 0
    assert [k["revoked"] for k in _listed(capsys)] == [False, True]
    # the last active admin key stays
    assert main(["keys", "revoke", str(admin_id)]) == 1
    assert "last active admin key" in capsys.readouterr().err
    assert main(["keys", "revoke", "999"]) == 4  # not found
    assert "no key 999" in capsys.readouterr().err
    assert [k["revoked"] for k in _listed(capsys)] == [False, True]
