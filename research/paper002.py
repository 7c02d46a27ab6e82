"""Seed 002 Figures 1–5 on the ITMS-like grid and its scalings (docs/math.md §7.1).

* ``002-bestfit`` — Fig. 1: ``E_MAE`` of ARRAY-AVERAGING (``m_UB`` = median),
  LEVY (``γ = 0.2``) and FIXEDQUANTILE under WRAPAROUND versus BESTFIT grouping.
* ``002-mae`` — Fig. 2: BASELINE, ARRAY-AVERAGING, LEVY and QUANTILE (BESTFIT)
  on the ITMS-like grid, plus dpgate's worst-case-driven mechanisms
  (``opt_array``, ``opt_array_convex``, ``clip``, ``worst_case_optimal``, ``auto``).
* ``002-scaling`` — Figs. 3–4: the same under sample scaling and user scaling
  (``λ = 10``); for user scaling ARRAY-AVERAGING uses ``m_UB`` of eq. 9, as 002 does.
* ``002-staircase`` — Fig. 5: ``m^(ε)`` of eq. 15 for ``0.001 <= ε <= 2``.

002 §IV-A: each algorithm runs ``10^4`` times on one data set and
``E_MAE = mean_i |M^(i)(D) - μ(D)|``; ``ε`` from 0.5 to 2; arrays hold each user's
mean in place of its records (``user_mean_fill``, 002 §IV-A). 002's Fig. 2 is on the
real (non-i.i.d.) ITMS data, which is not public: here it is the ITMS-like grid of
:mod:`app.synth.itms` (same counts, i.i.d. projected-normal speeds, 002 §IV-C).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from app.core import plan_mean
from app.core.data.counts import prepare_counts
from app.core.data.grid import GridData
from app.core.mechanisms.grouping import opt_array_convex_m, opt_array_m
from app.synth.itms import ITMS_U, itms_counts
from research.common import (
    ExperimentResult,
    Progress,
    fmt,
    line_plot,
    markdown_table,
    mc_stderr,
    panel_plot,
    seed_for,
)
from research.noise import SeededNoise
from research.simulate import MaePoint, simulate_abs_errors
from research.workloads import (
    SCALING_LAMBDA,
    check_itms_counts,
    itms_grid,
    sample_scaled,
    user_scaled,
)

__all__ = [
    "EPS_002",
    "LABELS",
    "PAPER_SET",
    "WORST_CASE_SET",
    "itms_dataset",
    "mae_curves",
    "run_bestfit",
    "run_mae",
    "run_scaling",
    "run_staircase",
    "staircase",
]

EPS_002: tuple[float, ...] = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)
U = ITMS_U
PAPER_SET = ("baseline", "array_avg_bestfit", "levy", "quantile_fixed", "quantile_optimized")
WORST_CASE_SET = ("opt_array", "opt_array_convex", "clip", "worst_case_optimal", "auto")
LABELS = {
    "baseline": "BASELINE",
    "array_avg_bestfit": "ARRAY-AVG (bestfit)",
    "array_avg_wrap": "ARRAY-AVG (wraparound)",
    "levy": "LEVY (bestfit)",
    "levy@wrap": "LEVY (wraparound)",
    "quantile_fixed": "FIXEDQUANTILE (bestfit)",
    "quantile_fixed@wrap": "FIXEDQUANTILE (wraparound)",
    "quantile_optimized": "ε-QUANTILE (bestfit)",
    "opt_array": "opt_array (eq. 15)",
    "opt_array_convex": "opt_array_convex (eq. 19)",
    "clip": "clip",
    "worst_case_optimal": "worst_case_optimal",
    "auto": "auto",
}


def itms_dataset(seed: int, counts: np.ndarray | None = None, key: str = "itms") -> GridData:
    """The ITMS-like grid with speeds drawn from ``seed`` (same data for every figure)."""
    rng = np.random.default_rng(seed_for(seed, "dataset", key))
    return itms_grid(rng, counts)


def mae_curves(
    grid: GridData,
    mechanisms: Sequence[str],
    eps_list: Sequence[float],
    *,
    runs: int,
    seed: int,
    key: str,
    bar: Progress | None = None,
    options: dict[str, dict[str, object]] | None = None,
) -> dict[str, list[MaePoint]]:
    """``E_MAE`` of each mechanism at each ``ε``; every point has its own seeded noise."""
    out: dict[str, list[MaePoint]] = {}
    for mech in mechanisms:
        pts = []
        opts = (options or {}).get(mech, {})
        for eps in eps_list:
            noise = SeededNoise(np.random.default_rng(seed_for(seed, key, mech, eps)))
            err, ran = simulate_abs_errors(grid, U, eps, mech, runs, noise, **opts)  # type: ignore[arg-type]
            pts.append(MaePoint(ran, float(eps), float(err.mean()), mc_stderr(err), runs))
            if bar is not None:
                bar.update()
        out[mech] = pts
    return out


def _table(eps_list: Sequence[float], curves: dict[str, list[MaePoint]]) -> str:
    header = ["ε", *(LABELS.get(m, m) for m in curves)]
    rows = [[f"{e:g}", *(fmt(curves[m][i].mae) for m in curves)] for i, e in enumerate(eps_list)]
    se = max(p.stderr for pts in curves.values() for p in pts)
    return markdown_table(header, rows) + f"\nLargest Monte-Carlo standard error: {fmt(se, 2)}.\n"


def _ran(curves: dict[str, list[MaePoint]]) -> str:
    auto = curves.get("auto")
    if not auto:
        return ""
    picks = ", ".join(f"ε={p.eps:g}: {p.mechanism}" for p in auto)
    return f"\n`auto` resolved (from the public counts) to: {picks}.\n"


def _series(curves: dict[str, list[MaePoint]], names: Sequence[str]) -> dict[str, list[float]]:
    return {LABELS.get(m, m): [p.mae for p in curves[m]] for m in names if m in curves}


def _header(runs: int, seed: int, grid: GridData, what: str) -> str:
    facts = check_itms_counts(grid.counts)
    return (
        f"{what} `U = {U:g}`, {runs} runs per point, seed {seed}; data: L = {facts['L']}, "
        f"m* = {facts['m_max']}, m_* = {facts['m_min']}, n = {facts['n']}, "
        f"median = {facts['median']}, m_UB(eq. 9) = {facts['m_ub_eq9']} "
        f"(K = {facts['K']}, K̄ = {facts['K_bar']}); true mean μ(D) = "
        f"{grid.values.mean():.5f}.\n\n"
    )


def run_bestfit(
    out_dir: Path,
    *,
    runs: int = 10_000,
    seed: int = 0,
    progress: bool = True,
    eps_list: Sequence[float] = EPS_002,
) -> ExperimentResult:
    """002 Fig. 1: WRAPAROUND versus BESTFIT for ARRAY-AVERAGING, LEVY, FIXEDQUANTILE."""
    t0 = time.perf_counter()
    grid = itms_dataset(seed)
    pairs = {
        "ARRAY-AVERAGING (m_UB = median)": ("array_avg_wrap", "array_avg_bestfit"),
        "LEVY (γ = 0.2, m_UB eq. 9)": ("levy@wrap", "levy"),
        "FIXEDQUANTILE (m_UB eq. 9)": ("quantile_fixed@wrap", "quantile_fixed"),
    }
    mechs = [m for p in pairs.values() for m in p]
    with Progress(len(mechs) * len(eps_list), "002-bestfit", progress) as bar:
        curves = mae_curves(grid, mechs, eps_list, runs=runs, seed=seed, key="002-bestfit", bar=bar)
    fig = panel_plot(
        Path(out_dir) / "002_fig1_bestfit_vs_wraparound.png",
        list(eps_list),
        {title: _series(curves, pair) for title, pair in pairs.items()},
        suptitle="002 Fig. 1 — WRAPAROUND vs BESTFIT on the ITMS-like grid",
        xlabel="ε",
        ylabel="E_MAE",
        logy=True,
    )
    checks = {}
    for base in ("levy", "quantile_fixed"):
        wrap = curves[f"{base}@wrap"]
        best = curves[base]
        checks[f"bestfit beats wraparound for {base} at every ε"] = all(
            b.mae < w.mae for b, w in zip(best, wrap, strict=True)
        )
    md = (
        _header(runs, seed, grid, "ITMS-like grid,")
        + _table(eps_list, curves)
        + "\nWRAPAROUND versions of LEVY/QUANTILE account for a user in two arrays "
        "(sensitivity ×2 in the interval and the noise; see `research/simulate.py`).\n"
    )
    return ExperimentResult(
        "002-bestfit",
        "Seed 002 Fig. 1 — grouping: WRAPAROUND vs BESTFIT",
        md,
        [fig],
        checks,
        {"curves": curves},
        time.perf_counter() - t0,
    )


def run_mae(
    out_dir: Path,
    *,
    runs: int = 10_000,
    seed: int = 0,
    progress: bool = True,
    eps_list: Sequence[float] = EPS_002,
) -> ExperimentResult:
    """002 Fig. 2: the mean mechanisms on the ITMS-like grid (plus dpgate's bounded ones)."""
    t0 = time.perf_counter()
    grid = itms_dataset(seed)
    mechs = [*PAPER_SET, *WORST_CASE_SET]
    with Progress(len(mechs) * len(eps_list), "002-mae", progress) as bar:
        curves = mae_curves(grid, mechs, eps_list, runs=runs, seed=seed, key="002-mae", bar=bar)
    fig = panel_plot(
        Path(out_dir) / "002_fig2_mae_itms.png",
        list(eps_list),
        {
            "002's algorithms (BESTFIT)": _series(curves, PAPER_SET),
            "worst-case-driven (dpgate) vs BASELINE": _series(
                curves, ("baseline", *WORST_CASE_SET)
            ),
        },
        suptitle="002 Fig. 2 — E_MAE on the ITMS-like grid",
        xlabel="ε",
        ylabel="E_MAE",
        logy=True,
    )
    base = curves["baseline"]
    clipping = ("array_avg_bestfit", "levy", "quantile_fixed", "quantile_optimized")
    checks = {
        "every clipping mechanism of 002 beats BASELINE at every ε": all(
            curves[m][i].mae < base[i].mae for m in clipping for i in range(len(eps_list))
        )
    }
    md = (
        _header(runs, seed, grid, "ITMS-like grid,")
        + _table(eps_list, curves)
        + _ran(curves)
        + "\n`clip`, `opt_array`, `worst_case_optimal` and `auto` minimise the *worst-case* "
        "error (docs/math.md §3–§5), so on this i.i.d. grid they keep (almost) every record "
        "and their average error stays near BASELINE's (`clip` picks m = m* here, i.e. BASELINE).\n"
    )
    return ExperimentResult(
        "002-mae",
        "Seed 002 Fig. 2 — mean mechanisms on the ITMS-like grid",
        md,
        [fig],
        checks,
        {"curves": curves},
        time.perf_counter() - t0,
    )


def run_scaling(
    out_dir: Path,
    *,
    runs: int = 10_000,
    seed: int = 0,
    progress: bool = True,
    eps_list: Sequence[float] = EPS_002,
    lam: int = SCALING_LAMBDA,
) -> ExperimentResult:
    """002 Figs. 3–4: sample scaling and user scaling with ``λ = 10``."""
    t0 = time.perf_counter()
    base_counts = itms_counts()
    sets = {
        "sample": sample_scaled(base_counts, lam),
        "user": user_scaled(base_counts, lam),
    }
    extra = ("opt_array", "clip", "worst_case_optimal")
    mechs = [*PAPER_SET, *extra]
    files: list[Path] = []
    checks: dict[str, bool] = {}
    data: dict[str, object] = {}
    parts = []
    with Progress(2 * len(mechs) * len(eps_list), "002-scaling", progress) as bar:
        for fig_no, (kind, counts) in zip((3, 4), sets.items(), strict=True):
            grid = itms_dataset(seed, counts, key=f"itms-{kind}-scaled")
            opts: dict[str, dict[str, object]] = {}
            if kind == "user":  # 002 §IV-C: "m_UB as in (9) for ARRAY-AVERAGING as well"
                m9 = plan_mean(counts, U, 1.0, "levy").details["m_ub"]
                opts["array_avg_bestfit"] = {"m_ub": m9}
            curves = mae_curves(
                grid,
                mechs,
                eps_list,
                runs=runs,
                seed=seed,
                key=f"002-{kind}",
                bar=bar,
                options=opts,
            )
            data[kind] = curves
            files.append(
                line_plot(
                    Path(out_dir) / f"002_fig{fig_no}_{kind}_scaling.png",
                    list(eps_list),
                    _series(curves, mechs),
                    title=f"002 Fig. {fig_no} — {kind} scaling (λ = {lam}), ITMS-like grid",
                    xlabel="ε",
                    ylabel="E_MAE",
                    logy=True,
                )
            )
            winner = "levy" if kind == "sample" else "quantile_fixed"
            others = [m for m in PAPER_SET if m != winner]
            checks[f"{LABELS[winner]} wins among 002's algorithms under {kind} scaling"] = all(
                curves[winner][i].mae < min(curves[m][i].mae for m in others)
                for i in range(len(eps_list))
            )
            parts.append(
                f"### Fig. {fig_no}: {kind} scaling (λ = {lam})\n\n"
                + _header(runs, seed, grid, f"{kind}-scaled ITMS-like grid,")
                + _table(eps_list, curves)
            )
    md = "\n".join(parts)
    return ExperimentResult(
        "002-scaling",
        "Seed 002 Figs. 3–4 — sample and user scaling",
        md,
        files,
        checks,
        data,
        time.perf_counter() - t0,
    )


def staircase(
    counts: np.ndarray, eps_list: Sequence[float], U: float = U
) -> tuple[np.ndarray, int]:
    """``m^(ε)`` of 002 eq. 15 (smallest minimiser) at each ``ε``, and ``m̄`` of eq. 19."""
    info = prepare_counts(counts)
    ms = np.array([opt_array_m(info, U, float(e)) for e in eps_list], dtype=np.int64)
    return ms, opt_array_convex_m(info)


def run_staircase(
    out_dir: Path,
    *,
    runs: int = 0,
    seed: int = 0,
    progress: bool = True,
    points: int = 400,
) -> ExperimentResult:
    """002 Fig. 5: the staircase ``m^(ε)`` for ``0.001 <= ε <= 2`` (log axis)."""
    del runs, seed  # deterministic: public counts only
    t0 = time.perf_counter()
    counts = itms_counts()
    eps = np.geomspace(1e-3, 2.0, points)
    with Progress(1, "002-staircase", progress) as bar:
        ms, m_bar = staircase(counts, eps)
        bar.update()
    fig = line_plot(
        Path(out_dir) / "002_fig5_staircase.png",
        eps.tolist(),
        {"m^(ε) (eq. 15)": ms.tolist(), f"m̄ (eq. 19) = {m_bar}": [m_bar] * eps.size},
        title="002 Fig. 5 — m^(ε) on the ITMS-like counts",
        xlabel="ε",
        ylabel="m^(ε)",
        logx=True,
        step=True,
    )
    n_steps = int(np.count_nonzero(np.diff(ms))) + 1
    shown = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
    at, _ = staircase(counts, shown)
    md = (
        f"ITMS-like counts, U = {U:g}, {points} values of ε on a log grid in [0.001, 2]: "
        f"m^(ε) takes {n_steps} distinct values (steps), from {int(ms[0])} to {int(ms[-1])} "
        f"(m* = {int(counts.max())}). Selected values:\n\n"
        + markdown_table(["ε", *(f"{e:g}" for e in shown)], [["m^(ε)", *at.tolist()]])
        + f"\nThe convex surrogate (eq. 19) gives m̄ = {m_bar} for every ε.\n"
    )
    checks = {"m^(ε) is non-decreasing in ε": bool(np.all(np.diff(ms) >= 0))}
    return ExperimentResult(
        "002-staircase",
        "Seed 002 Fig. 5 — the m^(ε) staircase",
        md,
        [fig],
        checks,
        {"eps": eps, "m": ms, "m_bar": m_bar},
        time.perf_counter() - t0,
    )
