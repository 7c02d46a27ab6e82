"""Reproduce 004 Figures 3–8 in shape: Clip-User on heavy-hitter occupancies.

004 §VI-A2/§VI-A3 (docs/math.md §7.2): ``G = 12`` grids, ``L = 2^12 - 1`` users, counts
``Geo(q = 0.01)``, the top count of each grid scaled by ``1 + γ`` for
``γ ∈ {3, 6, 9}``, ``U = 65``, ``eps ∈ [0.1, 1]``, 10 draws. For each draw and
``eps`` Clip-User (004 Alg. 1) runs with the grid of smallest initial error
protected, as in the paper's implementation (004 §VI-A3), followed by the
pseudo-user step (004 eq. 15). Reported, averaged over draws:

* Figures 3–5: ``P̂_eps = mean_i K^(i)_eps · eps`` against ``G₁ eps``;
* Figures 6–8: ``Ē̂_eps = mean_i Ē^(i)_eps`` against the original ``E_eps``.

Draw ``i`` uses the same seed for every ``γ`` (common random numbers): the
occupancies differ only by the heavy-hitter scaling, which makes the comparison
across ``γ`` less noisy without changing any single curve's distribution.

Run as ``python -m research.clip_user_figures --out DIR``.
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tqdm import tqdm

from app.core.planning.clip_user import clip_user
from research.workloads import heavy_hitter_occupancy

__all__ = [
    "DEFAULT_EPS",
    "FigureRow",
    "claims",
    "main",
    "markdown_table",
    "report_markdown",
    "run",
    "simulate",
    "write_figures",
]

DEFAULT_EPS: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(1, 11))
U_DEFAULT = 65.0
G_DEFAULT = 12
Q_DEFAULT = 0.01


@dataclass(frozen=True)
class FigureRow:
    """Monte-Carlo averages for one ``(γ, eps)`` (004 §VI-A3)."""

    gamma: float
    eps: float
    draws: int
    G1: int
    mean_k: float
    min_k: int
    max_k: int
    mean_e: float
    mean_e_bar: float

    @property
    def mean_k_eps(self) -> float:
        """``P̂_eps`` of 004 §VI-A3."""
        return self.mean_k * self.eps

    @property
    def g1_eps(self) -> float:
        """Privacy loss before Clip-User, ``G₁ eps`` (004 Cor. II.1)."""
        return self.G1 * self.eps


def simulate(
    *,
    draws: int = 10,
    eps_grid: Sequence[float] = DEFAULT_EPS,
    gammas: Sequence[float] = (3, 6, 9),
    seed: int = 0,
    progress: bool = True,
    U: float = U_DEFAULT,
    G: int = G_DEFAULT,
    q: float = Q_DEFAULT,
    protect_min_error_grid: bool = True,
) -> list[FigureRow]:
    """Run Clip-User + pseudo-user on ``draws`` occupancies per ``γ`` and every ``eps``."""
    if draws < 1:
        raise ValueError("draws must be >= 1")
    eps_list = [float(e) for e in eps_grid]
    if not eps_list:
        raise ValueError("eps_grid must not be empty")
    draw_seeds = np.random.SeedSequence(seed).spawn(draws)
    rows: list[FigureRow] = []
    total = len(gammas) * draws
    with tqdm(total=total, disable=not progress, desc="Clip-User draws", unit="draw") as bar:
        for gamma in gammas:
            K = np.zeros((draws, len(eps_list)), dtype=np.int64)
            E = np.zeros((draws, len(eps_list)))
            E_bar = np.zeros((draws, len(eps_list)))
            G1 = np.zeros(draws, dtype=np.int64)
            for i, ss in enumerate(draw_seeds):
                rng = np.random.default_rng(ss)
                grids, users, counts = heavy_hitter_occupancy(gamma, rng, G=G, q=q)
                for j, eps in enumerate(eps_list):
                    plan = clip_user(
                        grids,
                        users,
                        counts,
                        U,
                        eps,
                        protect_min_error_grid=protect_min_error_grid,
                    )
                    K[i, j], E[i, j], E_bar[i, j] = plan.K, plan.E, plan.E_bar
                    G1[i] = plan.G1
                bar.update(1)
            for j, eps in enumerate(eps_list):
                rows.append(
                    FigureRow(
                        gamma=float(gamma),
                        eps=eps,
                        draws=draws,
                        G1=int(G1.max()),
                        mean_k=float(K[:, j].mean()),
                        min_k=int(K[:, j].min()),
                        max_k=int(K[:, j].max()),
                        mean_e=float(E[:, j].mean()),
                        mean_e_bar=float(E_bar[:, j].mean()),
                    )
                )
    return rows


def markdown_table(rows: Sequence[FigureRow]) -> str:
    """One markdown table: ``P̂_eps`` vs ``G₁ eps`` and ``Ē̂`` vs ``E`` per ``(γ, eps)``."""
    lines = [
        "| γ | ε | G₁ε | mean Kε (P̂ε) | mean K | K range | mean E | mean Ē | Ē/E |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.gamma:g} | {r.eps:g} | {r.g1_eps:.2f} | {r.mean_k_eps:.3f} | "
            f"{r.mean_k:.2f} | {r.min_k}–{r.max_k} | {r.mean_e:.1f} | "
            f"{r.mean_e_bar:.1f} | {r.mean_e_bar / r.mean_e:.3f} |"
        )
    return "\n".join(lines) + "\n"


def _by_gamma(rows: Sequence[FigureRow]) -> dict[float, list[FigureRow]]:
    out: dict[float, list[FigureRow]] = {}
    for r in rows:
        out.setdefault(r.gamma, []).append(r)
    return out


def _plot_privacy(gamma: float, rows: list[FigureRow], path: Path) -> None:
    eps = [r.eps for r in rows]
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)  # Agg backend, no pyplot global state
    ax = fig.subplots()
    ax.plot(eps, [r.g1_eps for r in rows], "k--", label="G₁ε (before Clip-User)")
    ax.plot(eps, [r.mean_k_eps for r in rows], "o-", label="P̂ε = mean Kε (after)")
    ax.set_xscale("log")
    ax.set_xlabel("ε (per-grid budget)")
    ax.set_ylabel("privacy loss under composition")
    ax.set_title(f"Clip-User, heavy hitters: γ = {gamma:g}, q = {Q_DEFAULT:g}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _plot_error(gamma: float, rows: list[FigureRow], path: Path) -> None:
    eps = [r.eps for r in rows]
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)  # Agg backend, no pyplot global state
    ax = fig.subplots()
    ax.plot(eps, [r.mean_e for r in rows], "k--", label="E (before Clip-User)")
    ax.plot(eps, [r.mean_e_bar for r in rows], "o-", label="Ē (after pseudo-user step)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε (per-grid budget)")
    ax.set_ylabel("worst-case error across grids")
    ax.set_title(f"Worst-case error, heavy hitters: γ = {gamma:g}, q = {Q_DEFAULT:g}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(
    out_dir: Path,
    draws: int = 10,
    eps_grid: Sequence[float] = DEFAULT_EPS,
    gammas: Sequence[float] = (3, 6, 9),
    seed: int = 0,
    progress: bool = True,
) -> list[Path]:
    """Simulate, then write one privacy plot (Figs 3–5) and one error plot (Figs 6–8)
    per ``γ`` plus ``clip_user_figures.md``; return the written paths."""
    rows = simulate(draws=draws, eps_grid=eps_grid, gammas=gammas, seed=seed, progress=progress)
    return write_figures(out_dir, rows, draws=draws, seed=seed)


def write_figures(
    out_dir: Path,
    rows: Sequence[FigureRow],
    *,
    draws: int,
    seed: int,
    write_markdown: bool = True,
) -> list[Path]:
    """Write the plots of Figs 3–8 (and ``clip_user_figures.md``) for simulated ``rows``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for gamma, grows in _by_gamma(rows).items():
        p = out_dir / f"clip_user_privacy_gamma{gamma:g}.png"
        _plot_privacy(gamma, grows, p)
        paths.append(p)
        p = out_dir / f"clip_user_error_gamma{gamma:g}.png"
        _plot_error(gamma, grows, p)
        paths.append(p)
    if write_markdown:
        md = out_dir / "clip_user_figures.md"
        md.write_text(report_markdown(rows, draws=draws, seed=seed), encoding="utf-8")
        paths.append(md)
    return paths


def report_markdown(rows: Sequence[FigureRow], *, draws: int, seed: int) -> str:
    """The markdown of ``clip_user_figures.md``: set-up, one row per point, summary."""
    header = (
        "# Clip-User on heavy-hitter occupancies (004 Figs 3–8)\n\n"
        f"G = {G_DEFAULT}, L = 2^{G_DEFAULT} - 1, q = {Q_DEFAULT}, U = {U_DEFAULT:g}, "
        f"draws = {draws}, seed = {seed}, grid of smallest initial error protected "
        "(004 §VI-A3), joint mean+variance error with eps/2 each (004 eq. 13).\n\n"
    )
    return header + markdown_table(rows) + _summary(rows)


def claims(rows: Sequence[FigureRow]) -> dict[str, bool]:
    """docs/math.md §7.4 on Clip-User: ``Kε`` well below ``G₁ε`` (at most half of it at every
    point) and falling as ``γ`` grows (mean ``K`` over ``ε`` never rises from one ``γ``
    to the next and is strictly lower at the largest ``γ`` than at the smallest)."""
    by = _by_gamma(rows)
    gammas = sorted(by)
    avg = [sum(r.mean_k for r in by[g]) / len(by[g]) for g in gammas]
    return {
        "Kε <= G₁ε/2 at every (γ, ε)": all(r.mean_k_eps <= 0.5 * r.g1_eps for r in rows),
        "mean K falls as γ grows": all(a >= b for a, b in itertools.pairwise(avg))
        and avg[-1] < avg[0],
    }


def _summary(rows: Sequence[FigureRow]) -> str:
    lines = ["\nAverage over ε of mean K / G₁ (lower is better):\n"]
    for gamma, grows in _by_gamma(rows).items():
        ratio = sum(r.mean_k / r.G1 for r in grows) / len(grows)
        lines.append(f"- γ = {gamma:g}: {ratio:.3f}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gammas", type=float, nargs="+", default=[3, 6, 9])
    parser.add_argument("--eps", type=float, nargs="+", default=list(DEFAULT_EPS))
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if any(not math.isfinite(e) or e <= 0 for e in args.eps):
        parser.error("every eps must be finite and > 0")
    paths = run(
        args.out,
        draws=args.draws,
        eps_grid=args.eps,
        gammas=args.gammas,
        seed=args.seed,
        progress=not args.no_progress,
    )
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
