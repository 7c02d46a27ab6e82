"""``python -m app.cli``: the ``dpgate`` command."""

from app.cli.main import run

run()
