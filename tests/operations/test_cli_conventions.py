"""One convention for the ``dpgate`` command: one line per command in ``dpgate --help``;
every argument checked (hostile values give a message and exit 2, never a traceback);
the commands that talk to a server take ``--url``/``--key`` or ``DPGATE_URL``/
``DPGATE_KEY``, default to the local server, and exit 3 when refused, 4 when something
is not found, 5 when the server cannot be reached (naming the URL)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.cli.main import build_parser, main
from app.cli.support import LOCAL_URL
from tests.conftest import ADMIN_KEY
from tests.helpers import create_key
from tests.live_server import ThreadedServer, free_port
from tests.operations.test_ingest_pull import ROOT

#: Each command's hostile arguments: NaN, infinities, out-of-range numbers and dates,
#: non-numbers, blanks, files that do not exist.
HOSTILE: dict[tuple[str, ...], list[list[str]]] = {
    ("serve",): [["--port", "-1"], ["--port", "99999"], ["--port", "8e3"], ["--workers", "0"],
                 ["--workers", "nan"], ["--log-level", "loud"]],
    ("keys", "create"): [
        ["--role", "analyst", "--name", n, "--epsilon-quota", q]
        for n, q in (("a", "nan"), ("a", "inf"), ("a", "-1"), ("a", "0"), ("a", "1e400"),
                     ("a", "2e6"), ("  ", "1"), ("x" * 201, "1"))
    ],
    ("keys", "revoke"): [["0"], ["-5"], ["abc"], ["99999999999"], ["١"]],
    ("budget", "reset"): [["--dataset", d, "--reason", r]
                          for d, r in (("0", "x"), ("nan", "x"), ("-1", "x"), ("1", " "))],
    ("ingest", "gtfs-rt"): [["http://127.0.0.1:9/feed", "--dataset", "1", *extra]
                            for extra in (["--every", "nan"], ["--every", "inf"],
                                          ["--every", "0"], ["--polls", "0"],
                                          ["--timeout", "-inf"], ["--timeout", "nan"])]
                           + [["http://127.0.0.1:9/feed", "--dataset", "nan"]],
    ("publish",): [["--dataset", "1", "--day", day, *budget]
                   for day, budget in (("2024-03-05", ["--epsilon", "nan"]),
                                       ("2024-03-05", ["--epsilon", "inf"]),
                                       ("2024-03-05", ["--epsilon", "-1"]),
                                       ("2024-03-05", ["--epsilon", "1e-9"]),
                                       ("2024-03-05", ["--max-user-cost", "nan"]),
                                       ("2024-03-05", ["--max-user-cost", "1e400"]),
                                       ("9999-12-31", ["--epsilon", "1"]),
                                       ("0001-01-01", ["--epsilon", "1"]),
                                       ("2024-02-30", ["--epsilon", "1"]),
                                       ("tomorrow", ["--epsilon", "1"]))]
                  + [["--dataset", "1", "--day", "2024-03-05", "--epsilon", "1", *extra]
                     for extra in (["--min-users", "0"], ["--h3-resolution", "16"],
                                   ["--timeout", "nan"], ["--coarsest-resolution", "-1"])],
    ("demo",): [["--port", "-1"], ["--data", "/nonexistent/day.csv"]],
    ("experiments",): [["002-mae", "--out", "/tmp/x", "--runs", r] for r in ("1", "-5")]
                      + [["002-mae", "--out", "/tmp/x", "--seed", "-1"],
                         ["002-mae", "--out", "/tmp/x", "--draws", "0"]],
}  # fmt: skip


def test_help_lists_each_command_on_one_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    for name in sub.choices:  # type: ignore[union-attr]
        (line,) = [ln for ln in lines if re.match(rf"  {name}\s", ln)]
        assert len(line) <= 80 and len(line.split(maxsplit=1)) == 2, line


@pytest.mark.parametrize(
    ("command", "argv"), [(c, a) for c, cases in HOSTILE.items() for a in cases]
)
def test_hostile_arguments_get_a_message_and_exit_2(
    command: tuple[str, ...], argv: list[str], capsys
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*command, *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["--epsilon", "nan", "--day", "2024-03-05"],
        ["--epsilon", "inf", "--day", "2024-03-05"],
        ["--epsilon", "1", "--day", "9999-12-31"],
    ],
)
def test_publish_refuses_what_crashed_it_in_a_real_process(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "publish", "--dataset", "1", "--key", "k", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "error: argument --" in done.stderr


@pytest.fixture
def served(app: FastAPI, client: TestClient) -> Iterator[tuple[str, int]]:
    """The app over real HTTP and a dataset of it."""
    ds = client.post("/datasets", json={"name": "cli", "value_bound": 10, "budget_per_user": 1})
    with ThreadedServer(app) as server:
        yield server.url, ds.json()["id"]


def _reset(*extra: str) -> list[str]:
    return ["budget", "reset", "--reason", "new month", *extra]


def test_server_commands_read_url_and_key_from_the_environment(
    served: tuple[str, int], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    url, ds = served
    monkeypatch.delenv("DPGATE_URL", raising=False)
    monkeypatch.delenv("DPGATE_KEY", raising=False)
    for command in (["budget", "reset"], ["publish"]):
        defaults = build_parser().parse_args(
            [*command, "--dataset", "1", "--reason", "r"]
            if command[0] == "budget"
            else [*command, "--dataset", "1", "--day", "2024-03-05", "--epsilon", "1"]
        )
        assert (defaults.url, defaults.key) == (LOCAL_URL, None)
    assert main(_reset("--dataset", str(ds))) == 2
    assert "DPGATE_KEY" in capsys.readouterr().err
    monkeypatch.setenv("DPGATE_URL", url)
    monkeypatch.setenv("DPGATE_KEY", ADMIN_KEY)
    assert main(_reset("--dataset", str(ds))) == 0
    assert f"dataset {ds}: budget epoch 2 opened" in capsys.readouterr().out


def test_server_commands_share_the_exit_codes(
    served: tuple[str, int], client: TestClient, capsys
) -> None:
    url, ds = served
    analyst = create_key(client, "analyst")
    assert main(_reset("--dataset", str(ds), "--url", url, "--key", analyst)) == 3
    assert "refused" in capsys.readouterr().err
    assert main(_reset("--dataset", str(ds), "--url", url, "--key", "dpg_nobody")) == 3
    capsys.readouterr()
    assert main(_reset("--dataset", str(ds + 9), "--url", url, "--key", ADMIN_KEY)) == 4
    assert f"no dataset {ds + 9}" in capsys.readouterr().err
    dead = f"http://127.0.0.1:{free_port()}"
    for command in (
        _reset("--dataset", str(ds)),
        ["publish", "--dataset", str(ds), "--day", "2024-03-05", "--epsilon", "1"],
    ):
        assert main([*command, "--url", dead, "--key", ADMIN_KEY]) == 5
        assert f"cannot reach {dead}" in capsys.readouterr().err
    assert main(_reset("--dataset", str(ds), "--url", "127.0.0.1:1", "--key", "k")) == 2
    assert "--url" in capsys.readouterr().err


def test_serve_refuses_an_address_it_cannot_listen_on(capsys) -> None:
    assert main(["serve", "--host", "999.1.1.1"]) == 2
    assert "cannot resolve host '999.1.1.1'" in capsys.readouterr().err
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        assert main(["serve", "--host", "127.0.0.1", "--port", port]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
