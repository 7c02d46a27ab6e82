"""Shared pieces of the experiments: results, markdown tables, Agg plots, progress.

Every experiment returns an :class:`ExperimentResult` (its markdown and the files
it wrote) and is reproducible from ``(runs, seed)``: randomness of dpgate's own
mechanisms comes from :class:`research.noise.SeededNoise` over
``numpy.random.default_rng(seed)`` (never OpenDP's sampler in a simulation).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

__all__ = [
    "ExperimentResult",
    "Progress",
    "fmt",
    "line_plot",
    "markdown_table",
    "mc_stderr",
    "panel_plot",
    "seed_for",
]


def _figure(width: float, height: float) -> Any:
    """A matplotlib figure on the Agg backend (imported here: a run that plots nothing, such
    as a test importing the data readers, does not load matplotlib)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


@dataclass
class ExperimentResult:
    """What one experiment produced: a markdown section and the files it wrote.

    ``checks`` maps a short claim (docs/math.md §7.4) to whether it held in this run;
    ``data`` holds the raw numbers for tests.
    """

    name: str
    title: str
    markdown: str
    files: list[Path] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    data: dict[str, object] = field(default_factory=dict)
    seconds: float = 0.0


class Progress:
    """A tqdm bar that can be switched off (tests) and shared by sub-steps."""

    def __init__(self, total: int, desc: str, enabled: bool = True) -> None:
        self.bar = tqdm(total=total, desc=desc, disable=not enabled, unit="pt", leave=True)

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def seed_for(seed: int, *keys: object) -> np.random.SeedSequence:
    """A child seed for ``(seed, *keys)``: stable across runs, independent across keys."""
    spawn = tuple(zlib.crc32(str(k).encode()) for k in keys)
    return np.random.SeedSequence(int(seed), spawn_key=spawn)


def fmt(x: float | None, digits: int = 4) -> str:
    """A compact number for tables (``—`` for None/NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1000 or ax < 1e-3:
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:.{digits}g}"


def mc_stderr(abs_errors: np.ndarray) -> float:
    """Standard error of a Monte-Carlo mean absolute error."""
    a = np.asarray(abs_errors, dtype=np.float64)
    return float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else float("nan")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table; numbers right-aligned."""
    rows = [list(r) for r in rows]
    align = []
    for j in range(len(header)):
        numeric = all(isinstance(r[j], int | float) or _looks_numeric(r[j]) for r in rows)
        align.append("---:" if numeric and rows else "---")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(v) for v in r) + " |")
    return "\n".join(lines) + "\n"


def _looks_numeric(v: object) -> bool:
    if not isinstance(v, str):
        return False
    try:
        float(v.replace("×", "").replace("—", "nan"))
    except ValueError:
        return False
    return True


def _cell(v: object) -> str:
    if isinstance(v, float):
        return fmt(v)
    return str(v)


def line_plot(
    path: Path,
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    styles: dict[str, str] | None = None,
    step: bool = False,
) -> Path:
    """One PNG line plot on the Agg backend (no pyplot global state)."""
    fig = _figure(6.4, 4.2)
    ax = fig.subplots()
    for label, ys in series.items():
        style = (styles or {}).get(label, "o-")
        if step:
            ax.step(x, ys, where="post", label=label)
        else:
            ax.plot(x, ys, style, label=label, markersize=4)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def panel_plot(
    path: Path,
    x: Sequence[float],
    panels: dict[str, dict[str, Sequence[float]]],
    *,
    suptitle: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
) -> Path:
    """Several line plots side by side in one PNG (Agg backend)."""
    n = len(panels)
    fig = _figure(4.6 * n, 4.0)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, (title, series) in zip(axes, panels.items(), strict=True):
        for label, ys in series.items():
            ax.plot(x, ys, "o-", label=label, markersize=4)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
