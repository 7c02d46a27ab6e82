"""``user_mean`` on real grids: the width of its ci95 and how often it holds the truth.

Run ``nice python benchmarks/user_mean.py`` (well under a minute; ``--runs`` seeded draws
per grid, default 200). Grids as in ``benchmarks/accuracy.py``: every H3 res-8 cell ×
local hour with at least 20 buses of each CapMetrics day in ``../shared/data/capmetrics``
(U = 30 m/s, all speeds, user = ``vehicle_id``). Every grid of a day is released the way
a slot release does it (``start_many`` then ``finish_batch``, docs/math.md §13) with
seeded Laplace noise (``SeededNoise``). For each ε in {0.5, 1, 2}:

* ``width/U``: the median (and 90th percentile) over grids of the published ci95's width
  as a share of the range, from public counts (``expected_user_mean_widths``: the width
  before projection, capped at ``U``) and as published (after projection);
* ``cover``: the share of draws whose ci95 holds the grid's true per-unit mean (the mean
  over its buses of each bus's own mean speed), pooled over grids, and on the worst grid;
* ``exact``: the same probability computed from the Laplace law instead of sampled
  (``P(ν̃ − ν − h <= −Z <= ν̃ − ν + h)``, ``h = b ln 20 + B``), its smallest value over grids.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import CAP_U, DATA, EPS, load_grids

from app.core import GridData, expected_user_mean_widths, finish_batch, start_many
from research.noise import SeededNoise


def truth(grid: GridData) -> float:
    """The per-unit mean of all the grid's records, in float64 (its rounding is far
    below any interval's width)."""
    sums = np.add.reduceat(grid.values, grid.offsets[:-1])
    return float(np.mean(sums / grid.counts))


def _laplace_cdf(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.where(x < 0, 0.5 * np.exp(x / b), 1.0 - 0.5 * np.exp(-x / b))
    return out


def _exact_cover(miss: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``P(|miss + Z| <= b ln 20 + B)`` for ``Z ~ Lap(b)``: the interval holds the truth
    (projection onto ``[0, U]``, where the truth lies, changes nothing)."""
    h = scale * np.log(20.0) + bias
    return _laplace_cdf(h - miss, scale) - _laplace_cdf(-h - miss, scale)


def day_figures(grids: list[GridData], eps: float, runs: int, seed: int) -> dict[str, np.ndarray]:
    """Per grid: public width, published widths and coverage over ``runs`` draws."""
    caps = [g.counts for g in grids]
    public = expected_user_mean_widths([g.counts for g in grids], caps, CAP_U, eps)
    pending = start_many(("user_mean",), grids, caps, CAP_U, eps)
    truths = np.array([truth(g) for g in grids])
    exact = _exact_cover(
        np.array(pending.value) - truths, np.array(pending.scale), np.array(pending.bias)
    )
    noise = SeededNoise(np.random.default_rng(seed))
    hits = np.zeros(len(grids))
    widths = np.zeros((runs, len(grids)))
    for r in range(runs):
        done = finish_batch(pending, noise)
        ci = np.array(done.ci95, dtype=np.float64)
        widths[r] = ci[:, 1] - ci[:, 0]
        hits += (ci[:, 0] <= truths) & (truths <= ci[:, 1])
    return {
        "public": public / CAP_U,
        "published": np.median(widths, axis=0) / CAP_U,
        "cover": hits / runs,
        "exact": exact,
        "units": np.array([g.counts.size for g in grids]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    days = {
        day: g for (day, drop_zero), g in sorted(load_grids(args.data).items()) if not drop_zero
    }
    print(f"user_mean on CapMetrics res-8 hourly grids with >= 20 buses, U = {CAP_U:g} m/s")
    print(f"{'eps':>4} {'grids':>5} {'med L':>6} {'width/U public':>15} {'p90':>6} "
          f"{'published':>9} {'cover':>6} {'worst':>6} {'exact':>6}")  # fmt: skip
    for i, eps in enumerate(EPS):
        parts = [
            day_figures(g, eps, args.runs, 1000 * i + k) for k, g in enumerate(days.values()) if g
        ]
        f = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        print(
            f"{eps:>4g} {f['units'].size:>5} {np.median(f['units']):>6.0f} "
            f"{np.median(f['public']):>15.3f} {np.quantile(f['public'], 0.9):>6.3f} "
            f"{np.median(f['published']):>9.3f} {f['cover'].mean():>6.4f} {f['cover'].min():>6.3f} "
            f"{f['exact'].min():>6.4f}"
        )


if __name__ == "__main__":
    main()
