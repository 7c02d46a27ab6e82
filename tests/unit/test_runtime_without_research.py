"""The service and the demo need neither the research package nor its libraries."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESEARCH_ONLY = ("matplotlib", "tqdm")


def test_runtime_dependencies_leave_the_research_libraries_to_their_extra() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = " ".join(meta["dependencies"])
    extras = meta["optional-dependencies"]
    for name in RESEARCH_ONLY:
        assert name not in runtime, name
        assert any(d.startswith(name) for d in extras["research"]), name
    assert "dpgate[research]" in extras["dev"]  # the suite runs research's tests


def test_service_demo_and_cli_import_no_research_library() -> None:
    code = (
        "import sys\n"
        "import app.main, app.cli.demo, app.cli.demo_city, app.cli.main\n"
        "app.cli.main.build_parser().parse_args(['demo'])\n"
        f"bad = [m for m in {RESEARCH_ONLY!r} if m in sys.modules]\n"
        "assert not bad, bad\n"
        "assert not [m for m in sys.modules if m.startswith('research.') "
        "and m != 'research.runner'], 'only the light runner for the parser'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
