"""What dpgate says about its numbers: the ci95 of every answer, on real and synthetic grids.

Run ``nice python benchmarks/intervals.py`` (about a minute on one core; ``--runs`` draws
per real grid, default 40, and ten times as many on the single ITMS-like grid). Grids as in
``benchmarks/accuracy.py``: every H3 res-8 cell × local hour with at least 20 buses of
each CapMetrics day in ``../shared/data/capmetrics`` (U = 30 m/s,
all speeds), and the ITMS-like grid (002 §IV, U = 65). For each statistic and ε in
{0.5, 1, 2}, per system:

* ``cover``: the share of draws whose published ci95 holds the grid's true value (the
  mean or population variance of all its records), averaged over grids, and on the worst
  grid (published draws only);
* ``width``: the median published width as a share of the range (``U`` or ``U²/4``);
* ``null``: the share of answers with no ci95;
* ``MAE``: the median per-grid ratio of the mean absolute error to the peers' capping
  rule's (``benchmarks/accuracy.py``), and for ``auto`` ``pred``: the median ratio of
  ``expected_error`` (the preview's prediction, public) to the realised MAE.

Systems: ``auto`` (accuracy first, the default), ``auto objective=interval``,
``baseline`` (its honest interval: zero bias, ``b ln 20``) and ``auto noise-only`` —
auto's estimate ± ``noise_scale·ln 20``, the interval the peer libraries report
(OpenDP's ``laplacian_scale_to_accuracy`` at α = 0.05), which ignores what clipping moved.
Noise is seeded (``SeededNoise``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import CAP_U, DATA, EPS, load_grids, peer_rule
from accuracy import _median as median_count

from app.core import GridData, Release, release_mean, release_variance
from app.core.mechanisms.auto import expected_error
from app.synth.itms import ITMS_U
from research.common import seed_for
from research.noise import SeededNoise
from research.paper002 import itms_dataset

LN20 = math.log(20.0)
SYSTEMS: dict[str, tuple[str, dict[str, str]]] = {
    "auto": ("auto", {}),
    "auto objective=interval": ("auto", {"objective": "interval"}),
    "baseline": ("baseline", {}),
}


def _top(stat: str, U: float) -> float:
    return U if stat == "mean" else U * U / 4.0


def _noise_only(rel: Release, hi: float) -> tuple[float, float]:
    half = rel.noise_scale * LN20
    return max(0.0, rel.estimate - half), min(hi, rel.estimate + half)


def grid_rows(
    set_name: str, gi: int, grid: GridData, U: float, runs: int
) -> list[dict[str, object]]:
    """One row per (statistic, ε, system) for one grid."""
    rows: list[dict[str, object]] = []
    release: dict[str, Callable[..., Release]] = {
        "mean": release_mean,
        "variance": release_variance,
    }
    for stat in ("mean", "variance"):
        truth = float(grid.values.mean() if stat == "mean" else grid.values.var())
        hi = _top(stat, U)
        for eps in EPS:
            est, scale = peer_rule(stat, grid, U, eps, median_count(np.asarray(grid.counts)))
            rng = np.random.default_rng(seed_for(0, set_name, gi, stat, eps, "peer"))
            peer = np.clip(est + rng.laplace(0.0, scale, 4000), 0.0, hi)
            peer_mae = float(np.abs(peer - truth).mean())
            for system, (mech, opts) in SYSTEMS.items():
                seed = seed_for(0, set_name, gi, stat, eps, system)
                noise = SeededNoise(np.random.default_rng(seed))
                rels = [release[stat](grid, U, eps, mech, noise=noise, **opts) for _ in range(runs)]
                views = [(system, [r.ci95 for r in rels])]
                if system == "auto":
                    views.append(("auto noise-only", [_noise_only(r, hi) for r in rels]))
                mae = float(np.mean([abs(r.estimate - truth) for r in rels]))
                for name, cis in views:
                    shown = [c for c in cis if c is not None]
                    rows.append(
                        {
                            "set": set_name,
                            "grid": gi,
                            "stat": stat,
                            "eps": eps,
                            "system": name,
                            "mae_ratio": mae / peer_mae if peer_mae > 0 else math.nan,
                            "pred_ratio": (
                                expected_error(stat, grid.counts, U, eps) / mae
                                if name == "auto" and mae > 0
                                else math.nan
                            ),
                            "null": 1.0 - len(shown) / runs,
                            "cover": (
                                float(np.mean([lo <= truth <= up for lo, up in shown]))
                                if shown
                                else math.nan
                            ),
                            "width": (
                                float(np.median([(up - lo) / hi for lo, up in shown]))
                                if shown
                                else math.nan
                            ),
                        }
                    )
    return rows


def _f(x: float, d: int = 2) -> str:
    return "—" if not np.isfinite(x) else f"{x:.{d}f}"


def table(rows: list[dict[str, object]], sets: list[str], title: str) -> str:
    """A markdown table for the grids of ``sets``: one row per (statistic, system, ε)."""
    out = [
        f"**{title}** ({len({(r['set'], r['grid']) for r in rows if r['set'] in sets})} grids)",
        "",
        "| stat | system | ε | cover (worst grid) | width / range | null | MAE ÷ peers "
        "| expected ÷ realised |",
        "|---|---|---|---|---|---|---|---|",
    ]
    systems = list(dict.fromkeys(str(r["system"]) for r in rows))
    for stat in ("mean", "variance"):
        for system in systems:
            for eps in EPS:
                sel = [
                    r
                    for r in rows
                    if r["set"] in sets
                    and r["stat"] == stat
                    and r["system"] == system
                    and r["eps"] == eps
                ]
                if not sel:
                    continue
                col = {
                    k: np.array([float(r[k]) for r in sel])  # type: ignore[arg-type]
                    for k in ("cover", "width", "null", "mae_ratio", "pred_ratio")
                }
                cov = col["cover"][np.isfinite(col["cover"])]
                wid = col["width"][np.isfinite(col["width"])]
                pred = col["pred_ratio"][np.isfinite(col["pred_ratio"])]
                out.append(
                    f"| {stat} | {system} | {eps:g} | "
                    f"{_f(float(cov.mean()) if cov.size else math.nan, 3)} "
                    f"({_f(float(cov.min()) if cov.size else math.nan)}) | "
                    f"{_f(float(np.median(wid)) if wid.size else math.nan)} | "
                    f"{_f(float(col['null'].mean()))} | {_f(float(np.median(col['mae_ratio'])))} | "
                    f"{_f(float(np.median(pred)) if pred.size else math.nan)} |"
                )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40, help="draws per grid and ε (default 40)")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--every", type=int, default=1, help="every n-th real grid (quicker runs)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = grid_rows("ITMS-like", 0, itms_dataset(0), ITMS_U, 10 * args.runs)  # one grid
    real: list[str] = []
    if args.data.is_dir():
        for (day, drop_zero), grids in load_grids(args.data).items():
            if drop_zero:
                continue
            real.append(day)
            for gi, grid in enumerate(grids[:: args.every]):
                rows.extend(grid_rows(day, gi, grid, CAP_U, args.runs))
    else:
        print(f"CapMetrics data not found in {args.data}: the ITMS-like grid only", file=sys.stderr)
    print(
        f"{args.runs} draws per real grid and ε, {10 * args.runs} on the ITMS-like grid; "
        f"{time.perf_counter() - t0:.0f} s\n"
    )
    if real:
        print(table(rows, real, "CapMetrics, res-8 hourly grids with ≥ 20 buses, U = 30 m/s"))
        print()
    print(table(rows, ["ITMS-like"], "ITMS-like grid, U = 65"))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
