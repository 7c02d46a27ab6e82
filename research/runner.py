"""``dpgate experiments <name>``: run one experiment (or ``all``) and write its outputs.

Each experiment writes its PNG figures and ``<name>.md`` (title, set-up, tables,
the docs/math.md §7.4 claims it checks, wall time) into ``--out``. ``all`` runs every
experiment in turn and, with ``--report PATH``, writes one combined markdown
report whose image links are relative to the report (this is how
``docs/papers.md`` is produced; see its first lines for the exact command).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from research import INSTALL_HINT, missing_dependencies

if TYPE_CHECKING:  # the heavy imports (matplotlib) wait until an experiment runs
    from research.common import ExperimentResult

__all__ = ["EXPERIMENTS", "main", "run_experiment", "write_report"]


@dataclass(frozen=True)
class Spec:
    """How to run one experiment: its function, default runs and what it reproduces."""

    func: Callable[..., ExperimentResult]
    default_runs: int | None
    summary: str
    uses_data: bool = False


def _clip_user(
    out_dir: Path,
    *,
    runs: int | None = None,
    seed: int = 0,
    progress: bool = True,
    draws: int = 10,
) -> ExperimentResult:
    """004 Figs. 3–8 on heavy-hitter occupancies (:mod:`clip_user_figures`)."""
    from research import clip_user_figures as cuf
    from research.common import ExperimentResult

    del runs
    t0 = time.perf_counter()
    rows = cuf.simulate(draws=draws, seed=seed, progress=progress)
    files = cuf.write_figures(out_dir, rows, draws=draws, seed=seed, write_markdown=False)
    body = cuf.report_markdown(rows, draws=draws, seed=seed).split("\n", 2)[2]
    return ExperimentResult(
        "004-clip-user",
        "Seed 004 Figs. 3–8 — Clip-User on heavy-hitter occupancies",
        body,
        files,
        cuf.claims(rows),
        {"rows": rows},
        time.perf_counter() - t0,
    )


def _lazy(module: str, name: str) -> Callable[..., ExperimentResult]:
    def call(*args: object, **kwargs: object) -> ExperimentResult:
        mod = __import__(f"research.{module}", fromlist=[name])
        return getattr(mod, name)(*args, **kwargs)

    return call


EXPERIMENTS: dict[str, Spec] = {
    "002-bestfit": Spec(_lazy("paper002", "run_bestfit"), 10_000, "002 Fig. 1"),
    "002-mae": Spec(_lazy("paper002", "run_mae"), 10_000, "002 Fig. 2"),
    "002-scaling": Spec(_lazy("paper002", "run_scaling"), 10_000, "002 Figs. 3–4"),
    "002-staircase": Spec(_lazy("paper002", "run_staircase"), None, "002 Fig. 5"),
    "003-bounding": Spec(_lazy("paper003", "run_bounding"), 10_000, "003 Figs. 2–3"),
    "004-clip-user": Spec(_clip_user, None, "004 Figs. 3–8"),
    "004-capmetrics": Spec(
        _lazy("capmetrics", "run_capmetrics"), None, "004 Figs. 1–2 (CapMetrics)", True
    ),
    "peers": Spec(_lazy("peers", "run_peers"), 2000, "OpenDP, PipelineDP, diffprivlib", True),
}


def run_experiment(
    name: str,
    out_dir: Path,
    *,
    runs: int | None = None,
    seed: int = 0,
    progress: bool = True,
    data: str | Path | None = None,
    draws: int | None = None,
) -> ExperimentResult:
    """Run experiment ``name`` and write ``<out_dir>/<name>.md`` next to its figures."""
    spec = EXPERIMENTS[name]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, object] = {"seed": seed, "progress": progress}
    if spec.default_runs is not None:
        kwargs["runs"] = runs if runs is not None else spec.default_runs
    if spec.uses_data:
        kwargs["data"] = data
    if name == "004-clip-user" and draws is not None:
        kwargs["draws"] = draws
    t0 = time.perf_counter()
    result = spec.func(out_dir, **kwargs)
    result.seconds = time.perf_counter() - t0
    (out_dir / f"{name}.md").write_text(_section(result, out_dir, level=1), encoding="utf-8")
    return result


def _section(result: ExperimentResult, base: Path, level: int = 2) -> str:
    h = "#" * level
    lines = [f"{h} {result.title} (`{result.name}`)\n"]
    for f in result.files:
        if f.suffix == ".png":
            rel = os.path.relpath(f, base)
            lines.append(f"![{f.stem}]({rel})\n")
    lines.append(result.markdown.rstrip() + "\n")
    if result.checks:
        lines.append("\nClaims checked in this run:\n")
        for claim, ok in result.checks.items():
            lines.append(f"- {'✅' if ok else '❌'} {claim}")
        lines.append("")
    lines.append(f"\n_Wall time: {result.seconds:.1f} s._\n")
    return "\n".join(lines)


def _versions() -> str:
    import importlib.metadata as md

    parts = [f"Python {platform.python_version()}"]
    for dist in ("numpy", "opendp", "matplotlib", "pipeline-dp", "diffprivlib"):
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            parts.append(f"{dist} (not installed)")
    parts.append(f"{os.cpu_count()} CPUs")
    return ", ".join(parts)


def write_report(
    results: Sequence[ExperimentResult], report: Path, command: str, seconds: float
) -> Path:
    """One markdown report of several experiments (image links relative to ``report``)."""
    from research.common import markdown_table

    report = Path(report)
    report.parent.mkdir(parents=True, exist_ok=True)
    claims = [
        [r.name, claim, "✅ holds" if ok else "❌ does not hold"]
        for r in results
        for claim, ok in r.checks.items()
    ]
    timing = [[r.name, f"{r.seconds:.1f}"] for r in results]
    head = [
        "# dpgate — the seed papers' figures and the peers comparison\n",
        "Regenerate everything on this page (figures under `docs/figures/`) with:\n",
        f"```bash\n{command}\n```\n",
        f"Generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} with {_versions()}; "
        f"total wall time {seconds / 60:.1f} min.\n",
        "Every simulation of a dpgate mechanism draws its noise from "
        "`SeededNoise(numpy.random.default_rng(seed))` (never OpenDP's sampler), so the "
        "dpgate numbers are reproducible bit for bit; OpenDP's and PipelineDP's own samplers "
        "are not seedable, so the peers' numbers move within their standard errors. The "
        "peers comparison needs `pip install '.[peers]'` (a missing library is reported and "
        "skipped); the CapMetrics experiments need `../shared/data/capmetrics/` or `--data`.\n",
        "## Claims (docs/math.md §7.4)\n",
        markdown_table(["experiment", "claim", "result"], claims),
        "## Wall time per experiment\n",
        markdown_table(["experiment", "seconds"], timing),
    ]
    body = [_section(r, report.parent) for r in results]
    report.write_text("\n".join(head) + "\n" + "\n".join(body), encoding="utf-8")
    return report


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value < 2**32:
            raise argparse.ArgumentTypeError(f"must be from {low} to 2^32 - 1, not {text}")
        return value

    return parse


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The options of ``dpgate experiments`` (also usable stand-alone)."""
    p = parser or argparse.ArgumentParser(prog="dpgate experiments", description=__doc__)
    p.add_argument("name", choices=[*EXPERIMENTS, "all"], help="experiment to run")
    p.add_argument("--out", type=Path, required=True, help="directory for figures and tables")
    p.add_argument(
        "--runs",
        type=_at_least(2),
        default=None,
        help="Monte-Carlo runs per point (default 10^4 for 002/003, 2000 for peers)",
    )
    p.add_argument(
        "--seed", type=_at_least(0), default=0, help="seed of the simulated data and noise"
    )
    p.add_argument(
        "--draws", type=_at_least(1), default=None, help="occupancy draws for 004-clip-user"
    )
    p.add_argument(
        "--data",
        default=None,
        help="CapMetrics CSV (default $DPGATE_CAPMETRICS_CSV or "
        "../shared/data/capmetrics/2016-11-25.csv when present)",
    )
    p.add_argument("--report", type=Path, default=None, help="also write a combined report")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def command_line(args: argparse.Namespace) -> str:
    """The ``dpgate experiments ...`` command that reproduces ``args`` (for reports)."""
    parts = ["dpgate", "experiments", args.name, "--out", str(args.out)]
    for flag in ("runs", "seed", "draws", "data", "report"):
        value = getattr(args, flag)
        if value is not None and not (flag == "seed" and value == 0):
            parts += [f"--{flag}", str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def run_from_args(args: argparse.Namespace) -> int:
    """Run what ``args`` asks for; print the written files and a claims summary.

    Without the ``research`` extra's libraries: one line saying which install is
    needed, exit status 2.
    """
    missing = missing_dependencies()
    if missing:
        print(f"{INSTALL_HINT} (missing: {', '.join(missing)})", file=sys.stderr)
        return 2
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    t0 = time.perf_counter()
    results = []
    for name in names:
        r = run_experiment(
            name,
            args.out,
            runs=args.runs,
            seed=args.seed,
            progress=not args.no_progress,
            data=args.data,
            draws=args.draws,
        )
        results.append(r)
        print(f"{name}: {r.seconds:.1f} s -> {args.out / (name + '.md')}", flush=True)
        for claim, ok in r.checks.items():
            print(f"  {'ok ' if ok else 'NOT'} {claim}", flush=True)
    total = time.perf_counter() - t0
    if args.report is not None:
        path = write_report(results, args.report, command_line(args), total)
        print(f"report: {path}")
    print(f"total: {total:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m research") -> int:
    """Stand-alone entry point (``python -m research``; ``dpgate experiments`` calls it too)."""
    args = build_parser(argparse.ArgumentParser(prog=prog, description=__doc__)).parse_args(argv)
    return run_from_args(args)


if __name__ == "__main__":
    raise SystemExit(main())
