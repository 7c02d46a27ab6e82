"""Accuracy of ``auto`` and every dpgate mechanism against the peers' capping rule.

Run ``nice python benchmarks/accuracy.py --quick`` (a few minutes on one core) or
without ``--quick`` for every mechanism and the peer libraries. Grids: every H3 res-8
cell × local hour (America/Chicago) with at least 20 buses of each CapMetrics day in
``../shared/data/capmetrics`` (U = 30 m/s, user = ``vehicle_id``), with and without
zero speeds, and the ITMS-like grid (002 §IV, U = 65).

The reference is the rule OpenDP, PipelineDP and diffprivlib users apply: keep each
user's first ``k`` records (``k`` = the grid's median count), add Laplace noise of
scale ``U k / (Σ min(m_l, k) ε)`` (exact user-level sensitivity, public denominator)
to the mean of the kept records, project onto ``[0, U]``; for the variance the
same records, 004 Prop III.1's sensitivity, projection onto ``[0, U²/4]``. OpenDP's
and diffprivlib's releases have exactly this law (``research/peer_libraries.py``); with
``--libraries`` the libraries themselves are run too (k = median, a quarter of the runs,
on every 8th grid of each set: PipelineDP costs milliseconds per release).
"k best in hindsight" is the peer rule at the candidate ``k`` with the smallest exact
expected error on that grid (not a rule anyone can run privately).

For each ε in {0.5, 1, 2}: the median over grids of the per-grid MAE ratio
(mechanism ÷ peer rule at the median ``k``), the pooled ratio (sum of MAEs ÷ sum of
peer MAEs) and the coverage of ``ci95`` (share of runs whose interval, projected onto
the range, holds the grid's true value), per real day and pooled. dpgate answers are
projected onto their range like the peers' (free post-processing). Noise is seeded
(``SeededNoise``); parsed grids are cached in ``$TMPDIR/dpgate-accuracy-grids.pkl``.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core import MEAN_MECHANISMS, VARIANCE_MECHANISMS, GridData
from app.core.engine.single_grid import release_mean, release_variance
from app.core.mechanisms.auto import expected_error
from app.core.mechanisms.bounds import variance_sensitivity
from app.synth.itms import ITMS_U
from research.capmetrics import load_capmetrics
from research.common import seed_for
from research.noise import SeededNoise
from research.paper002 import itms_dataset
from research.peer_libraries import k_candidates, peer_available, peer_estimates

EPS = (0.5, 1.0, 2.0)
CAP_U = 30.0
MIN_BUSES = 20
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "capmetrics"
LN20 = math.log(20.0)
LIBRARY_EVERY = 8  # --libraries runs the peer libraries on every 8th grid of each set

Grid = tuple[str, GridData, float]  # (set name, grid, U)


# ------------------------------------------------------------------------ grids
def _day_grids(path: Path, drop_zero: bool) -> list[GridData]:
    day = load_capmetrics(path, drop_zero=drop_zero)
    g, _ = day.grid_keys()
    order = np.lexsort((np.arange(g.size), day.ts_us, day.users, g))
    gs, us, vs = g[order], day.users[order], day.values[order]
    cuts = np.flatnonzero(np.diff(gs)) + 1
    out = []
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, gs.size], strict=True):
        _, counts = np.unique(us[a:b], return_counts=True)
        if counts.size >= MIN_BUSES:
            out.append(GridData.from_counts_and_values(counts, vs[a:b]))
    return out


def load_grids(data: Path) -> dict[tuple[str, bool], list[GridData]]:
    """``{(day, drop_zero): grids}``, cached by file names, sizes and mtimes."""
    files = sorted(data.glob("*.csv"))
    key = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    cache = Path(tempfile.gettempdir()) / "dpgate-accuracy-grids.pkl"
    if cache.is_file():
        stored = pickle.loads(cache.read_bytes())
        if stored.get("key") == key:
            return stored["grids"]
    grids = {(f.stem, dz): _day_grids(f, dz) for f in files for dz in (True, False)}
    cache.write_bytes(pickle.dumps({"key": key, "grids": grids}))
    return grids


# ------------------------------------------------------------------- references
def _median(counts: np.ndarray) -> int:
    c = np.sort(counts[counts > 0])[::-1]
    return int(c[(c.size + 1) // 2 - 1])


def _head(grid: GridData, k: int) -> np.ndarray:
    return grid.values[grid.record_rank < np.minimum(grid.counts, k)[grid.record_user]]


def peer_rule(stat: str, grid: GridData, U: float, eps: float, k: int) -> tuple[float, float]:
    """``(noiseless estimate, Laplace scale)`` of the capping rule at ``k``."""
    head = _head(grid, k)
    if stat == "mean":
        return float(head.mean()), U * k / (head.size * eps)
    return float(head.var()), variance_sensitivity(U, k, head.size) / eps


def _lap_mae(c: float, b: float) -> float:
    c = abs(c)
    return c + b * math.exp(-c / b) if b > 0 else c


def hindsight_k(stat: str, grid: GridData, U: float, eps: float, truth: float) -> int:
    """The candidate ``k`` with the smallest exact expected error (projection aside)."""
    best = min(
        (_lap_mae(est - truth, b), k)
        for k in k_candidates(grid.counts)
        for est, b in [peer_rule(stat, grid, U, eps, k)]
    )
    return best[1]


# -------------------------------------------------------------------- simulation
def _hi(stat: str, U: float) -> float:
    return U if stat == "mean" else U * U / 4.0


def _peer_runs(
    stat: str,
    grid: GridData,
    U: float,
    eps: float,
    k: int,
    truth: float,
    rng: np.random.Generator,
    runs: int,
) -> tuple[float, float]:
    est, b = peer_rule(stat, grid, U, eps, k)
    hi = _hi(stat, U)
    draws = np.clip(est + rng.laplace(0.0, b, runs), 0.0, hi)
    lo_ci = np.clip(draws - b * LN20, 0.0, hi)
    hi_ci = np.clip(draws + b * LN20, 0.0, hi)
    cover = float(np.mean((lo_ci <= truth) & (truth <= hi_ci)))
    return float(np.abs(draws - truth).mean()), cover


def _dpgate_runs(
    stat: str,
    grid: GridData,
    U: float,
    eps: float,
    mech: str,
    truth: float,
    noise: SeededNoise,
    runs: int,
) -> tuple[float, float]:
    release = release_mean if stat == "mean" else release_variance
    err = np.empty(runs)
    cov = np.empty(runs)
    for r in range(runs):
        rel = release(grid, U, eps, mech, noise=noise)
        err[r] = abs(rel.estimate - truth)  # estimate and ci95 are already in range
        # no published interval (ci95 null, ci95_note says why): no coverage to count
        cov[r] = math.nan if rel.ci95 is None else rel.ci95[0] <= truth <= rel.ci95[1]
    coverage = float(np.nanmean(cov)) if np.isfinite(cov).any() else math.nan
    return float(err.mean()), coverage


def _library_mae(grid: GridData, U: float, eps: float, k: int, truth: float, runs: int) -> dict:
    out = {}
    for peer in ("opendp", "pipeline_dp", "diffprivlib"):
        if peer_available(peer) is None:
            continue
        est = np.clip(peer_estimates(peer, grid, U, eps, k, runs, seed=0), 0.0, U)
        out[f"lib:{peer}"] = float(np.abs(est - truth).mean())
    return out


def evaluate(
    sets: dict[str, list[tuple[GridData, float]]],
    mechs: dict[str, Sequence[str]],
    runs: int,
    itms_runs: int,
    libraries: bool,
) -> list[dict]:
    """One row per (set, grid index, statistic, ε, system): MAE and coverage."""
    rows = []
    for set_name, grids in sets.items():
        n_runs = itms_runs if set_name == "ITMS-like" else runs
        for gi, (grid, U) in enumerate(grids):
            for stat in ("mean", "variance"):
                truth = float(grid.values.mean() if stat == "mean" else grid.values.var())
                for eps in EPS:
                    rng = np.random.default_rng(seed_for(0, set_name, gi, stat, eps, "peer"))
                    kmed = _median(np.asarray(grid.counts))
                    base = {"set": set_name, "grid": gi, "stat": stat, "eps": eps}
                    mae, cov = _peer_runs(stat, grid, U, eps, kmed, truth, rng, n_runs)
                    rows.append({**base, "system": "peer k=median", "mae": mae, "cover": cov})
                    kb = hindsight_k(stat, grid, U, eps, truth)
                    mae, cov = _peer_runs(stat, grid, U, eps, kb, truth, rng, n_runs)
                    rows.append({**base, "system": "peer k=hindsight", "mae": mae, "cover": cov})
                    if libraries and stat == "mean" and gi % LIBRARY_EVERY == 0:
                        libs = _library_mae(grid, U, eps, kmed, truth, max(n_runs // 4, 50))
                        for name, m in libs.items():
                            rows.append({**base, "system": name, "mae": m, "cover": math.nan})
                    for mech in mechs[stat]:
                        noise = SeededNoise(
                            np.random.default_rng(seed_for(0, set_name, gi, stat, eps, mech))
                        )
                        mae, cov = _dpgate_runs(stat, grid, U, eps, mech, truth, noise, n_runs)
                        rows.append({**base, "system": mech, "mae": mae, "cover": cov})
                        if mech == "auto":
                            pred = expected_error(stat, grid.counts, U, eps)
                            rows.append(
                                {
                                    **base,
                                    "system": "auto predicted (expected_error)",
                                    "mae": pred,
                                    "cover": math.nan,
                                }
                            )
    return rows


# ----------------------------------------------------------------------- report
def summarise(rows: list[dict], groups: dict[str, Sequence[str]]) -> list[dict]:
    """Per (group of sets, statistic, ε, system): median and pooled ratio, coverage."""
    peer = {
        (r["set"], r["grid"], r["stat"], r["eps"]): r["mae"]
        for r in rows
        if r["system"] == "peer k=median"
    }
    out = []
    systems = list(dict.fromkeys(r["system"] for r in rows))
    for gname, members in groups.items():
        for stat in ("mean", "variance"):
            for eps in EPS:
                for system in systems:
                    sel = [
                        r
                        for r in rows
                        if r["set"] in members
                        and r["stat"] == stat
                        and r["eps"] == eps
                        and r["system"] == system
                    ]
                    if not sel:
                        continue
                    ref = np.array([peer[(r["set"], r["grid"], stat, eps)] for r in sel])
                    mae = np.array([r["mae"] for r in sel])
                    cov = np.array([r["cover"] for r in sel])
                    out.append(
                        {
                            "group": gname,
                            "stat": stat,
                            "eps": eps,
                            "system": system,
                            "grids": len(sel),
                            "median_ratio": float(np.median(mae / ref)),
                            "pooled_ratio": float(mae.sum() / ref.sum()),
                            "cover_mean": (
                                float(np.nanmean(cov)) if np.isfinite(cov).any() else math.nan
                            ),
                            "cover_min": float(np.nanmin(cov))
                            if np.isfinite(cov).any()
                            else math.nan,
                        }
                    )
    return out


def _f(x: float, d: int = 2) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def table(summary: list[dict], systems: Sequence[str] | None = None) -> str:
    """A markdown table: one row per (group, statistic, system), ε in columns."""
    head = (
        "| set | stat | system | grids | "
        + " | ".join(f"ε={e}: median · pooled · cover (min)" for e in EPS)
        + " |"
    )
    lines = [head, "|" + " --- |" * (4 + len(EPS))]
    keys = list(dict.fromkeys((s["group"], s["stat"], s["system"]) for s in summary))
    for g, stat, system in keys:
        if systems is not None and system not in systems:
            continue
        cells = []
        n = 0
        for eps in EPS:
            hit = [
                s
                for s in summary
                if (s["group"], s["stat"], s["system"], s["eps"]) == (g, stat, system, eps)
            ]
            if not hit:
                cells.append("—")
                continue
            s = hit[0]
            n = s["grids"]
            cells.append(
                f"{_f(s['median_ratio'])} · {_f(s['pooled_ratio'])} · "
                f"{_f(s['cover_mean'], 3)} ({_f(s['cover_min'], 2)})"
            )
        lines.append(f"| {g} | {stat} | {system} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="auto and the peer rule only, fewer runs")
    ap.add_argument("--runs", type=int, default=None, help="releases per grid (real grids)")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--libraries", action="store_true", help="also run the peer libraries")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    runs = args.runs or (100 if args.quick else 200)
    if args.quick:
        mechs: dict[str, Sequence[str]] = {"mean": ["auto"], "variance": ["auto"]}
    else:
        mechs = {"mean": list(MEAN_MECHANISMS), "variance": list(VARIANCE_MECHANISMS)}
    sets: dict[str, list[tuple[GridData, float]]] = {
        "ITMS-like": [(itms_dataset(0), ITMS_U)],
    }
    if args.data.is_dir():
        for (day, dz), grids in load_grids(args.data).items():
            sets[f"{day} {'no zeros' if dz else 'all speeds'}"] = [(g, CAP_U) for g in grids]
    else:
        print(f"CapMetrics data not found in {args.data}: ITMS-like grid only", file=sys.stderr)
    real = [s for s in sets if s != "ITMS-like"]
    groups: dict[str, Sequence[str]] = {"real (all days)": real, "ITMS-like": ["ITMS-like"]}
    for s in real:
        groups[s] = [s]
    rows = evaluate(sets, mechs, runs, 4 * runs, args.libraries)
    summary = summarise(rows, groups)
    print(
        f"runs per real grid: {runs}; ITMS-like grid: {4 * runs}; "
        f"real grids: {sum(len(sets[s]) for s in real)}; "
        f"{time.perf_counter() - t0:.0f} s (nice, one core)"
    )
    print(table(summary))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
