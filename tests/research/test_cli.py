"""``dpgate experiments``: the subcommand writes figures, tables and a report."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.cli.main import build_parser, main
from research.runner import EXPERIMENTS
from research.runner import main as research_main


def test_every_issue_experiment_is_registered():
    assert set(EXPERIMENTS) == {
        "002-mae", "002-bestfit", "002-scaling", "002-staircase", "003-bounding",
        "004-clip-user", "004-capmetrics", "peers",
    }  # fmt: skip
    args = build_parser().parse_args(["experiments", "all", "--out", "x"])
    assert args.name == "all" and args.runs is None and args.seed == 0


def test_experiment_writes_markdown_png_and_report(tmp_path, capsys):
    out = tmp_path / "figs"
    report = tmp_path / "docs" / "results.md"
    argv = ["experiments", "002-staircase", "--out", str(out), "--no-progress"]
    assert main([*argv, "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "002-staircase" in printed and "ok " in printed
    md = (out / "002-staircase.md").read_text(encoding="utf-8")
    assert "![002_fig5_staircase](002_fig5_staircase.png)" in md
    assert "✅ m^(ε) is non-decreasing in ε" in md
    assert (out / "002_fig5_staircase.png").read_bytes()[:4] == b"\x89PNG"
    text = report.read_text(encoding="utf-8")
    assert "dpgate experiments 002-staircase --out" in text  # the regenerating command
    assert "](../figs/002_fig5_staircase.png)" in text  # relative to the report


def test_capmetrics_without_data_says_so(tmp_path):
    argv = ["experiments", "004-capmetrics", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, "--data", str(tmp_path / "missing.csv")]) == 0
    assert "skipped" in (tmp_path / "004-capmetrics.md").read_text(encoding="utf-8")


def test_small_monte_carlo_run_through_the_cli(tmp_path):
    argv = ["experiments", "003-bounding", "--out", str(tmp_path), "--runs", "300"]
    assert main([*argv, "--seed", "3", "--no-progress"]) == 0
    text = (tmp_path / "003-bounding.md").read_text(encoding="utf-8")
    assert "300 fresh data sets per ε, seed 3" in text
    with pytest.raises(SystemExit) as refused:
        main(["experiments", "002-mae", "--out", str(tmp_path), "--runs", "1"])
    assert refused.value.code == 2


def test_no_source_of_randomness_outside_experiments_in_issue_7_files():
    # Repo hook: only research/ and app/cli/demo_city.py (the demo's seeded city; tests and
    # benchmarks too) may create generators.
    from pathlib import Path

    import app

    root = Path(app.__file__).parent
    for path in [
        root / "cli" / "demo.py",
        root / "cli" / "main.py",
        *sorted((root / "synth").glob("*.py")),
    ]:
        text = path.read_text(encoding="utf-8")
        for bad in ("np.random.", "numpy.random", "import random"):
            assert bad not in text, (path, bad)


def test_without_the_research_extra_one_line_says_which_install(tmp_path, capsys, monkeypatch):
    # An import of a module set to None in sys.modules fails as if it were not installed.
    monkeypatch.setitem(sys.modules, "tqdm", None)
    argv = ["experiments", "002-staircase", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install -e '.[research]'" in err and "tqdm" in err
    assert not list(tmp_path.iterdir())  # nothing was run or written
    assert research_main(argv[1:]) == 2  # python -m research says the same


def test_python_dash_m_research_runs_an_experiment(tmp_path):
    out = tmp_path / "figs"
    cmd = [sys.executable, "-m", "research", "002-staircase", "--out", str(out), "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert (out / "002-staircase.md").is_file()
