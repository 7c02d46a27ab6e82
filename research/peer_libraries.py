"""The three peer DP libraries, each releasing a user-level ``ε``-DP mean (issue 7).

:mod:`research.peers` compares dpgate with them; ``benchmarks/accuracy.py`` runs
them too. Every peer bounds contributions by capping each user at ``k`` records.

How each peer releases a user-level ``ε``-DP mean (neighbouring data sets: one
user's values all changed, occupancy public — docs/math.md §1.2):

* **OpenDP** (``opendp``): each user's earliest ``k`` records (a value-independent
  choice, as dpgate's ``clip``) form a vector of public length ``s = Σ min(m_l, k)``;
  the measurement is ``vector_domain(atom_domain(T=float), size=s),
  symmetric_distance() >> then_clamp((0, U)) >> then_mean() >>
  then_laplace(scale)``, ``scale`` found by ``binary_search_param`` so that the
  privacy map at ``d_in = 2k`` (one user's ``k`` records replaced = ``k``
  removals + ``k`` additions) is ``<= ε``: noise ``≈ kU/(s ε)``.
* **diffprivlib** (``diffprivlib.tools.mean``): the same truncated vector,
  ``bounds=(0, U)``, ``epsilon = ε/k`` (its mean is ``ε``-DP when one record
  changes, sensitivity ``U/s``; ``k`` records changing cost ``k·ε/k = ε`` by group
  privacy); its ``LaplaceTruncated`` output stays in ``[0, U]``; seeded through
  ``random_state``.
* **PipelineDP** (``pipeline_dp.DPEngine`` on ``LocalBackend``): all records,
  ``AggregateParams(metrics=[MEAN], noise_kind=LAPLACE, max_partitions_contributed=1,
  max_contributions_per_partition=k, min_value=0, max_value=U)``, one public
  partition, ``NaiveBudgetAccountant(total_epsilon=ε, total_delta=0)``. PipelineDP
  samples ``k`` of a user's records at random and releases
  ``mid + (Σ(x - mid) + Lap) / max(1, count + Lap)`` with ``ε/2`` on each part,
  calibrated for adding/removing a user (count ``±k``, normalised sum ``±kU/2``).
  Under our replace model the count does not move and the sum moves by up to
  ``kU``, i.e. ``ε/2 · 2 = ε`` in total: the same guarantee.

OpenDP's and PipelineDP's samplers are CSPRNG-based and cannot be seeded, so their
numbers are Monte-Carlo estimates that vary slightly between runs (the standard
errors are reported). :func:`peer_available` says whether a peer is installed
(``pip install '.[peers]'``).
"""

from __future__ import annotations

import importlib.metadata as md
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from app.core.data.grid import GridData

__all__ = [
    "LABELS",
    "PEERS",
    "hindsight_k",
    "k_candidates",
    "opendp_scale",
    "peer_available",
    "peer_estimates",
    "truncate_earliest",
    "truncation_mae",
]

PEERS = ("opendp", "pipeline_dp", "diffprivlib")
_DIST = {"opendp": "opendp", "pipeline_dp": "pipeline-dp", "diffprivlib": "diffprivlib"}
LABELS = {"opendp": "OpenDP", "pipeline_dp": "PipelineDP", "diffprivlib": "diffprivlib"}


def peer_available(name: str) -> str | None:
    """The installed version of a peer library, or ``None`` if it cannot be imported."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            __import__(name)
        return md.version(_DIST[name])
    except Exception:
        return None


def truncate_earliest(grid: GridData, k: int) -> np.ndarray:
    """Every user's earliest ``min(m_l, k)`` values (value-independent bounding)."""
    keep = grid.record_rank < np.minimum(grid.counts, int(k))[grid.record_user]
    return grid.values[keep]


def k_candidates(counts: np.ndarray) -> list[int]:
    """``{round(2^(j/2))} ∪ {median, m*}`` within ``[1, m*]`` (the hindsight search grid)."""
    c = np.sort(np.asarray(counts)[np.asarray(counts) > 0])[::-1]
    m_star = int(c[0])
    median = int(c[(c.size + 1) // 2 - 1])
    ks = {max(1, round(2 ** (j / 2))) for j in range(0, 60)}
    return sorted({k for k in ks if k <= m_star} | {median, m_star})


# ---------------------------------------------------------------- the three peers
def _opendp_mean(s: int, U: float) -> Callable[[float], Any]:
    """``scale ->`` OpenDP's measurement: the clamped mean of ``s`` values plus ``Lap(scale)``."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = (
        dp.vector_domain(dp.atom_domain(T=float, nan=False), size=int(s)),
        dp.symmetric_distance(),
    )

    def make(scale: float) -> dp.Measurement:
        return (
            space
            >> dp.t.then_clamp((0.0, float(U)))
            >> dp.t.then_mean()
            >> dp.m.then_laplace(scale)
        )

    return make


def opendp_scale(s: int, U: float, eps: float, k: int) -> float:
    """The Laplace scale OpenDP's own ``binary_search_param`` calibrates for the peer."""
    import opendp.prelude as dp

    return float(dp.binary_search_param(_opendp_mean(s, U), d_in=2 * int(k), d_out=float(eps)))


def _opendp(values: np.ndarray, U: float, eps: float, k: int, runs: int, seed: int) -> np.ndarray:
    import opendp.prelude as dp

    make = _opendp_mean(int(values.size), U)
    meas = make(dp.binary_search_param(make, d_in=2 * int(k), d_out=float(eps)))
    assert meas.map(2 * int(k)) <= eps
    data = values.tolist()
    return np.array([meas(data) for _ in range(runs)], dtype=np.float64)


def _diffprivlib(
    values: np.ndarray, U: float, eps: float, k: int, runs: int, seed: int
) -> np.ndarray:
    from diffprivlib import BudgetAccountant
    from diffprivlib.tools import mean

    state = np.random.RandomState(seed)  # diffprivlib's own seeding interface
    return np.array(
        [
            mean(
                values,
                epsilon=eps / k,
                bounds=(0.0, float(U)),
                random_state=state,
                accountant=BudgetAccountant(),
            )
            for _ in range(runs)
        ],
        dtype=np.float64,
    )


def _pipeline_dp(
    rows: list[tuple[int, float]], U: float, eps: float, k: int, runs: int, seed: int
) -> np.ndarray:
    import pipeline_dp

    ext = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda r: r[0],
        partition_extractor=lambda r: 0,
        value_extractor=lambda r: r[1],
    )
    params = pipeline_dp.AggregateParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        metrics=[pipeline_dp.Metrics.MEAN],
        max_partitions_contributed=1,
        max_contributions_per_partition=int(k),
        min_value=0.0,
        max_value=float(U),
    )
    out = np.empty(runs)
    for i in range(runs):
        acc = pipeline_dp.NaiveBudgetAccountant(total_epsilon=float(eps), total_delta=0)
        engine = pipeline_dp.DPEngine(acc, pipeline_dp.LocalBackend())
        res = engine.aggregate(rows, params, ext, public_partitions=[0])
        acc.compute_budgets()
        out[i] = next(iter(res))[1].mean
    return out


def peer_estimates(
    peer: str, grid: GridData, U: float, eps: float, k: int, runs: int, seed: int = 0
) -> np.ndarray:
    """``runs`` releases of the grid's mean by ``peer`` capping every user at ``k`` records."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if peer == "opendp":
            return _opendp(truncate_earliest(grid, k), U, eps, k, runs, seed)
        if peer == "diffprivlib":
            return _diffprivlib(truncate_earliest(grid, k), U, eps, k, runs, seed)
        if peer == "pipeline_dp":
            rows = list(zip(grid.record_user.tolist(), grid.values.tolist(), strict=True))
            return _pipeline_dp(rows, U, eps, k, runs, seed)
    raise ValueError(f"unknown peer {peer!r}")


def truncation_mae(grid: GridData, k: int, scale: float) -> float:
    """Expected ``|M - μ|`` of a cap-at-``k`` mean plus ``Lap(scale)``: ``c + b e^{-c/b}``.

    ``c`` is the (deterministic) gap between the mean of every user's earliest ``k``
    records and the grid's mean. This is exactly the MAE of the OpenDP and
    diffprivlib releases (diffprivlib's truncation of its output to ``[0, U]`` aside).
    """
    c = abs(float(truncate_earliest(grid, k).mean()) - float(grid.values.mean()))
    if scale <= 0:
        return c
    return c + scale * math.exp(-c / scale)


def hindsight_k(peer: str, grid: GridData, U: float, eps: float) -> int:
    """The candidate ``k`` with the smallest exact expected MAE for a truncating peer.

    ``peer == "opendp"`` uses OpenDP's calibrated scale; anything else the analytic
    ``kU/(sε)`` (diffprivlib's scale, and the centre of PipelineDP's search).
    """
    best: tuple[float, int] | None = None
    for k in k_candidates(grid.counts):
        s = int(np.minimum(grid.counts, k).sum())
        scale = opendp_scale(s, U, eps, k) if peer == "opendp" else k * U / (s * eps)
        key = (truncation_mae(grid, k, scale), k)
        if best is None or key < best:
            best = key
    assert best is not None
    return best[1]
