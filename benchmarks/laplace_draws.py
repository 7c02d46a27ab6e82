"""The Laplace draws of a day release: OpenDP's noise grid 2^-100 against its default.

Run ``python benchmarks/laplace_draws.py`` (``--draws``, default 240,000 as a day of the
synthetic city: 120,000 grids, mean and variance; ``--scales`` distinct scales, default
600; ``--repeats``). Times ``OpenDPNoise.laplace_many`` (the release path: one vector
``make_laplace`` per shared scale, at ``LAPLACE_K``, docs/math.md §9.1) and the same
grouping with OpenDP's default grid (``k`` left unset: 2^-1074), alternated, and prints
the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import opendp.prelude as dp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.noise.laplace import OpenDPNoise


def default_grid(values: list[float], scales: list[float]) -> list[float]:
    """``laplace_many``'s grouping with OpenDP's default grid (one vector call per scale)."""
    out = list(values)
    groups: dict[float, list[int]] = {}
    for i, s in enumerate(scales):
        groups.setdefault(s, []).append(i)
    space = (dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float))
    for scale, idx in groups.items():
        noisy = dp.m.make_laplace(*space, scale)([out[i] for i in idx])
        for i, x in zip(idx, noisy, strict=True):
            out[i] = float(x)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=240_000)
    parser.add_argument("--scales", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    dp.enable_features("contrib")
    rng = np.random.default_rng(7)  # the benchmark's inputs, not the release path's noise
    values = (rng.random(args.draws) * 30).tolist()
    scales = (0.5 + rng.integers(0, args.scales, args.draws) / args.scales).tolist()
    noise = OpenDPNoise()
    times: dict[str, list[float]] = {"grid 2^-100": [], "default grid 2^-1074": []}
    for _ in range(args.repeats):
        for name, draw in (
            ("grid 2^-100", noise.laplace_many),
            ("default grid 2^-1074", default_grid),
        ):
            started = time.perf_counter()
            draw(values, scales)
            times[name].append(time.perf_counter() - started)
    for name, runs in times.items():
        each = ", ".join(f"{t:.2f}" for t in runs)
        median = statistics.median(runs)
        print(f"{name}: {args.draws:,} draws, {args.scales} scales: median {median:.2f} s ({each})")


if __name__ == "__main__":
    main()
