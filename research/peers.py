"""dpgate next to today's DP libraries: user-level DP means on the same grids (issue 7).

For each grid and ``ε ∈ {0.5, 1, 2}`` the mean absolute error ``E|M(D) - μ(D)|``
(``μ(D)`` the mean of *all* the grid's records) over ``runs`` releases (2,000 by
default) of:

* **dpgate auto** — the mechanism ``auto`` picks from the public counts by
  worst-case error (docs/math.md §11), simulated with :mod:`research.simulate`;
* **dpgate centered_clip** — the data-adaptive mechanism of
  :mod:`app.core.mean_centered` (private centre and width, then user sums clipped
  around the centre) with its default options: a fixed public rule, not chosen by
  looking at errors, simulated by calling ``release_mean`` once per run;
* **dpgate best in hindsight** — the dpgate mean mechanism (default options) with
  the smallest simulated MAE on this grid at this ``ε`` (chosen by looking at the
  errors, so not a mechanism anyone could pick privately — reported for context);
* each **peer library**, with its own contribution bounding: every user capped at
  ``k`` records, ``k`` = the median count ``med(m_l)`` (002 §III-C's choice) and
  ``k`` = the best in hindsight (smallest MAE over the grid of ``k`` values
  ``{round(2^(j/2))} ∪ {median, m*}``; :func:`run_peers` says how it is found), each
  measured with ``runs`` fresh runs of the library.

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
errors are reported). A peer that is not installed is reported and skipped
(``pip install '.[peers]'``). Peer runs are spread over a process pool.
"""

from __future__ import annotations

import importlib.metadata as md
import math
import os
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.core import MEAN_MECHANISMS, plan_mean
from app.core.grid import GridData
from app.synth.itms import ITMS_U
from research.capmetrics import default_capmetrics_path, load_capmetrics
from research.common import ExperimentResult, Progress, fmt, markdown_table, seed_for
from research.noise import SeededNoise
from research.paper002 import itms_dataset
from research.simulate import simulate_abs_errors

__all__ = [
    "EPS_PEERS",
    "PEERS",
    "hindsight_k",
    "k_candidates",
    "opendp_scale",
    "peer_available",
    "peer_estimates",
    "run_peers",
    "truncate_earliest",
    "truncation_mae",
]

EPS_PEERS: tuple[float, ...] = (0.5, 1.0, 2.0)
PEERS = ("opendp", "pipeline_dp", "diffprivlib")
_DIST = {"opendp": "opendp", "pipeline_dp": "pipeline-dp", "diffprivlib": "diffprivlib"}
LABELS = {"opendp": "OpenDP", "pipeline_dp": "PipelineDP", "diffprivlib": "diffprivlib"}
DPGATE_MECHS = tuple(m for m in MEAN_MECHANISMS if m != "auto")
FEATURED = "centered_clip"  # reported on its own row: a fixed rule, not hindsight


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
def _opendp(values: np.ndarray, U: float, eps: float, k: int, runs: int, seed: int) -> np.ndarray:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    s = int(values.size)
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=s), dp.symmetric_distance()

    def make(scale: float) -> dp.Measurement:
        return (
            space
            >> dp.t.then_clamp((0.0, float(U)))
            >> dp.t.then_mean()
            >> dp.m.then_laplace(scale)
        )

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


def _task(args: tuple[str, np.ndarray, np.ndarray, float, float, int, int, int]) -> np.ndarray:
    peer, counts, values, U, eps, k, runs, seed = args
    grid = GridData.from_counts_and_values(counts, values)
    return peer_estimates(peer, grid, U, eps, k, runs, seed)


# ------------------------------------------------------------------ the experiment
@dataclass
class Row:
    """One system on one (grid, ε)."""

    dataset: str
    eps: float
    system: str
    detail: str
    mae: float
    stderr: float
    bias_bound: float | None
    k: int | None = None
    extra: dict[str, object] = field(default_factory=dict)


def _grids(data: str | Path | None, seed: int) -> tuple[list[tuple[str, GridData, float]], str]:
    out: list[tuple[str, GridData, float]] = []
    note = ""
    out.append(("ITMS-like grid (002 §IV)", itms_dataset(seed), ITMS_U))
    path = Path(data) if data is not None else default_capmetrics_path()
    if path is None or not path.is_file():
        note = "CapMetrics data not found: only the ITMS-like grid is compared.\n"
        return out, note
    day = load_capmetrics(path)
    g, _ = day.grid_keys()
    n_rec = np.bincount(g)
    top = np.argsort(-n_rec, kind="stable")[:3]
    for rank, idx in enumerate(top.tolist(), start=1):
        grid = day.grid_data(idx)
        out.append((f"CapMetrics grid #{rank} (busiest by records)", grid, day.U))
    return out, note


def _bias_bound(grid: GridData, U: float, k: int) -> float:
    s = int(np.minimum(grid.counts, k).sum())
    return U * (1.0 - s / grid.n_records)


def _stats(est: np.ndarray, mu: float) -> tuple[float, float]:
    err = np.abs(est - mu)
    return float(err.mean()), float(err.std(ddof=1) / np.sqrt(err.size)) if err.size > 1 else 0.0


_CHUNK_RUNS = 500


class _Batches:
    """Peer runs split into chunks of at most 500 runs over a process pool."""

    def __init__(self, pool: ProcessPoolExecutor, seed: int) -> None:
        self.pool = pool
        self.seed = seed
        self.futures: dict[tuple, list] = {}

    def submit(
        self, key: tuple, peer: str, grid: GridData, U: float, eps: float, k: int, runs: int
    ) -> None:
        futs = []
        for i, start in enumerate(range(0, runs, _CHUNK_RUNS)):
            n = min(_CHUNK_RUNS, runs - start)
            sd = int(seed_for(self.seed, *key, i).generate_state(1)[0])
            args = (peer, np.asarray(grid.counts), grid.values, U, eps, int(k), n, sd)
            futs.append(self.pool.submit(_task, args))
        self.futures[key] = futs

    def collect(self, bar: Progress) -> dict[tuple, np.ndarray]:
        out = {}
        for key, futs in self.futures.items():
            out[key] = np.concatenate([f.result() for f in futs])
            bar.update()
        self.futures = {}
        return out


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


def opendp_scale(s: int, U: float, eps: float, k: int) -> float:
    """The Laplace scale OpenDP's own ``binary_search_param`` calibrates for the peer."""
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

    return float(dp.binary_search_param(make, d_in=2 * int(k), d_out=float(eps)))


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


def run_peers(
    out_dir: Path,
    *,
    runs: int = 2000,
    seed: int = 0,
    progress: bool = True,
    data: str | Path | None = None,
    eps_list: Sequence[float] = EPS_PEERS,
    peers: Sequence[str] = PEERS,
    workers: int | None = None,
    grids: Sequence[tuple[str, GridData, float]] | None = None,
) -> ExperimentResult:
    """The peers comparison (module docstring); writes nothing but its markdown.

    ``grids`` (``(name, grid, U)`` triples) replaces the default grids (the ITMS-like
    grid and the three busiest CapMetrics grids); a name starting with ``ITMS`` is
    the one the issue's target applies to.

    Hindsight ``k``: OpenDP and diffprivlib release a cap-at-``k`` mean plus Laplace
    noise of a scale known in advance (OpenDP's own calibration, diffprivlib's
    ``kU/(sε)``), so their expected MAE at every candidate ``k`` is computed exactly
    (:func:`truncation_mae`) and the smallest wins. PipelineDP (random sampling, a
    noisy count) is searched with the library itself, by successive halving over the
    candidates within a factor 2.9 (three √2 steps) of that analytic optimum: each
    gets ``min(runs, 200)`` runs, the best three four times as many more, and the
    smallest pooled MAE wins. Every reported peer MAE then comes from ``runs`` fresh
    runs of the library at that ``k`` (one set when it equals the median).
    """
    del out_dir
    t0 = time.perf_counter()
    if grids is None:
        grids, note = _grids(data, seed)
    else:
        grids, note = list(grids), ""
    versions = {p: peer_available(p) for p in peers}
    live = [p for p in peers if versions[p] is not None]
    screen = max(1, min(runs, 200))
    rows: list[Row] = []
    n_workers = workers or min(2, os.cpu_count() or 1)
    combos = [(name, grid, U, eps) for name, grid, U in grids for eps in eps_list]
    mus = {name: float(grid.values.mean()) for name, grid, _ in grids}
    best_k: dict[tuple, int] = {}
    pdp_cands: dict[tuple, list[int]] = {}
    for name, grid, U, eps in combos:
        hint = hindsight_k("analytic", grid, U, eps)
        for p in live:
            if p == "pipeline_dp":
                kc = k_candidates(grid.counts)
                pdp_cands[(name, eps)] = [k for k in kc if hint / 2.9 <= k <= hint * 2.9]
            else:
                best_k[(name, eps, p)] = hindsight_k(p, grid, U, eps)
    total = (
        len(combos)
        + sum(len(v) for v in pdp_cands.values())
        + 3 * len(pdp_cands)
        + 2 * len(combos) * len(live)
    )
    with (
        Progress(total, "peers", progress) as bar,
        ProcessPoolExecutor(max_workers=n_workers) as pool,
    ):
        screening, finals = _Batches(pool, seed), _Batches(pool, seed)
        where = {(name, eps): (grid, U) for name, grid, U, eps in combos}
        for (name, eps), ks in pdp_cands.items():
            grid, U = where[(name, eps)]
            for k in ks:
                screening.submit(("screen", name, eps, k), "pipeline_dp", grid, U, eps, k, screen)

        def submit_finals(name: str, grid: GridData, U: float, eps: float, p: str) -> None:
            median, kb = _median(grid.counts), best_k[(name, eps, p)]
            finals.submit(("final", name, eps, p, median), p, grid, U, eps, median, runs)
            if kb != median:
                finals.submit(("final", name, eps, p, kb), p, grid, U, eps, kb, runs)
            else:
                bar.update()

        for name, grid, U, eps in combos:  # their k is known already: keep the pool busy
            for p in live:
                if p != "pipeline_dp":
                    submit_finals(name, grid, U, eps, p)
        for name, grid, U, eps in combos:  # dpgate runs in this process meanwhile
            rows.extend(_dpgate_rows(name, grid, U, eps, runs, seed, mus[name]))
            bar.update()
        first = screening.collect(bar)
        top: dict[tuple, list[int]] = {}
        for (name, eps), ks in pdp_cands.items():
            grid, U = where[(name, eps)]
            ranked = sorted(ks, key=lambda k: (_mae(first[("screen", name, eps, k)], mus[name]), k))
            top[(name, eps)] = ranked[:3]
            bar.update(3 - len(top[(name, eps)]))
            for k in top[(name, eps)]:
                screening.submit(
                    ("refine", name, eps, k), "pipeline_dp", grid, U, eps, k, 4 * screen
                )
        second = screening.collect(bar)
        for (name, eps), ks in top.items():

            def pooled(k: int, name: str = name, eps: float = eps) -> float:
                est = np.concatenate(
                    [first[("screen", name, eps, k)], second[("refine", name, eps, k)]]
                )
                return _mae(est, mus[name])

            best_k[(name, eps, "pipeline_dp")] = min(ks, key=lambda k: (pooled(k), k))
        if "pipeline_dp" in live:
            for name, grid, U, eps in combos:
                submit_finals(name, grid, U, eps, "pipeline_dp")
        final = finals.collect(bar)
        for name, grid, U, eps in combos:
            for p in live:
                median, kb = _median(grid.counts), best_k[(name, eps, p)]
                for label, k in (("median", median), ("hindsight", kb)):
                    mae, se = _stats(final[("final", name, eps, p, k)], mus[name])
                    rows.append(
                        Row(
                            name,
                            eps,
                            LABELS[p],
                            f"k = {k} ({label})",
                            mae,
                            se,
                            _bias_bound(grid, U, k),
                            k,
                            {"label": label},
                        )
                    )
    return _report(rows, grids, versions, runs, screen, seed, note, time.perf_counter() - t0)


def _mae(est: np.ndarray, mu: float) -> float:
    return float(np.abs(est - mu).mean())


def _median(counts: np.ndarray) -> int:
    c = np.sort(np.asarray(counts)[np.asarray(counts) > 0])[::-1]
    return int(c[(c.size + 1) // 2 - 1])


def _dpgate_rows(
    name: str, grid: GridData, U: float, eps: float, runs: int, seed: int, mu: float
) -> list[Row]:
    out = []
    best: Row | None = None
    for mech in ("auto", *DPGATE_MECHS):
        noise = SeededNoise(np.random.default_rng(seed_for(seed, "peers", name, mech, eps)))
        err, ran = simulate_abs_errors(grid, U, eps, mech, runs, noise, truth=mu)
        plan = plan_mean(grid.counts, U, eps, ran)
        r = Row(
            name,
            eps,
            "dpgate",
            ran,
            float(err.mean()),
            float(err.std(ddof=1) / np.sqrt(err.size)) if err.size > 1 else 0.0,
            plan.worst_case_bias,
            None,
            {"worst_case_error": plan.worst_case_error},
        )
        if mech == "auto":
            r.extra["role"] = "auto"
            out.append(r)
            continue
        if mech == FEATURED:
            out.append(Row(r.dataset, eps, "dpgate", ran, r.mae, r.stderr, r.bias_bound, None,
                           {**r.extra, "role": "featured"}))  # fmt: skip
        if best is None or r.mae < best.mae:
            best = r
    assert best is not None
    # Re-run the chosen mechanism with fresh noise, so its MAE is not the luckiest of ten.
    noise = SeededNoise(
        np.random.default_rng(seed_for(seed, "peers-fresh", name, best.detail, eps))
    )
    err, _ = simulate_abs_errors(grid, U, eps, best.detail, runs, noise, truth=mu)
    best.mae = float(err.mean())
    best.stderr = float(err.std(ddof=1) / np.sqrt(err.size)) if err.size > 1 else 0.0
    best.extra["role"] = "hindsight"
    out.append(best)
    return out


def _report(
    rows: list[Row],
    grids: list[tuple[str, GridData, float]],
    versions: dict[str, str | None],
    runs: int,
    screen: int,
    seed: int,
    note: str,
    seconds: float,
) -> ExperimentResult:
    lib = ", ".join(
        f"{LABELS[p]} {v}"
        if v
        else f"{LABELS[p]}: **not installed — skipped** (`pip install '.[peers]'`)"
        for p, v in versions.items()
    )
    summary = []
    checks: dict[str, bool] = {}
    ratios: dict[tuple[str, float], tuple[float, float]] = {}
    featured: dict[tuple[str, float], float] = {}
    for name, _, _ in grids:
        for eps in sorted({r.eps for r in rows if r.dataset == name}):
            here = [r for r in rows if r.dataset == name and r.eps == eps]
            auto = next(r for r in here if r.extra.get("role") == "auto")
            hind = next(r for r in here if r.extra.get("role") == "hindsight")
            feat = next(r for r in here if r.extra.get("role") == "featured")
            peers = [r for r in here if r.system != "dpgate"]
            if not peers:
                summary.append(
                    [name, f"{eps:g}", fmt(feat.mae), fmt(auto.mae), "—", "—", "—", "—", "—"]
                )
                continue
            bp = min(peers, key=lambda r: r.mae)
            ra, rh, rf = auto.mae / bp.mae, hind.mae / bp.mae, feat.mae / bp.mae
            ratios[(name, eps)] = (ra, rh)
            featured[(name, eps)] = rf
            summary.append(
                [
                    name,
                    f"{eps:g}",
                    fmt(feat.mae),
                    f"{fmt(auto.mae)} ({auto.detail})",
                    f"{fmt(hind.mae)} ({hind.detail})",
                    f"{fmt(bp.mae)} ({bp.system}, {bp.detail})",
                    f"{rf:.2f}",
                    f"{ra:.2f}",
                    f"{rh:.2f}",
                ]
            )
    itms = [v for (n, _), v in ratios.items() if n.startswith("ITMS")]
    if itms:
        checks[f"dpgate {FEATURED} MAE <= 1/2 of the best peer's at every ε (ITMS-like)"] = all(
            v <= 0.5 for (n, _), v in featured.items() if n.startswith("ITMS")
        )
        checks["dpgate auto MAE <= 1/2 of the best peer's at every ε (ITMS-like)"] = all(
            a <= 0.5 for a, _ in itms
        )
        checks["dpgate best-in-hindsight MAE <= 1/2 of the best peer's at every ε (ITMS-like)"] = (
            all(h <= 0.5 for _, h in itms)
        )
    detail = markdown_table(
        ["grid", "ε", "system", "mechanism / bounding", "MAE", "± s.e.", "worst-case bias bound"],
        [
            [
                r.dataset,
                f"{r.eps:g}",
                r.system,
                r.detail + _role(r),
                fmt(r.mae),
                fmt(r.stderr, 2),
                fmt(r.bias_bound) if r.bias_bound is not None else "none (data-dependent interval)",
            ]
            for r in rows
        ],
    )
    sizes = "; ".join(
        f"{n}: L = {g.n_users}, n = {g.n_records}, m* = {int(g.counts.max())}, "
        f"median = {int(np.sort(g.counts)[::-1][(g.n_users + 1) // 2 - 1])}, U = {U:g}"
        for n, g, U in grids
    )
    md = (
        f"{runs} runs per system and ε (k screening: {screen} runs per k), seed {seed}. "
        f"Libraries: {lib}.\n\nGrids — {sizes}.\n\n{note}"
        "#### Summary (MAE; ratio = dpgate / best peer, below 1 means dpgate is better)\n\n"
        + markdown_table(
            [
                "grid",
                "ε",
                f"dpgate {FEATURED}",
                "dpgate auto",
                "dpgate best in hindsight",
                "best peer",
                f"{FEATURED} / peer",
                "auto / peer",
                "hindsight / peer",
            ],
            summary,
        )
        + _reading(rows, ratios, featured)
        + "\n#### Every system\n\n"
        + detail
        + "\nWorst-case bias bound: `U(1 - Σ min(m_l, k)/n)` for a cap at `k` "
        "(docs/math.md §3.1 — the dropped records can all sit at 0 or U); dpgate's is its "
        "plan's `worst_case_bias`. "
        "PipelineDP's hindsight k comes from a Monte-Carlo search with the library: where its "
        "MAE curve is flat the chosen k can measure a few standard errors from the median's "
        "on the fresh runs, either way.\n"
    )
    return ExperimentResult(
        "peers",
        "dpgate next to OpenDP, PipelineDP and diffprivlib",
        md,
        [],
        checks,
        {"rows": rows, "ratios": ratios, "featured_ratios": featured, "versions": versions},
        seconds,
    )


def _reading(
    rows: list[Row],
    ratios: dict[tuple[str, float], tuple[float, float]],
    featured: dict[tuple[str, float], float],
) -> str:
    """What the ITMS-like rows say about the issue's target (dpgate <= 1/2 best peer)."""
    itms = {eps: v for (name, eps), v in ratios.items() if name.startswith("ITMS")}
    if not itms:
        return ""
    feat = {eps: v for (name, eps), v in featured.items() if name.startswith("ITMS")}
    here = [r for r in rows if r.dataset.startswith("ITMS")]
    auto_bias = max(r.bias_bound or 0.0 for r in here if r.extra.get("role") == "auto")
    med = [r for r in here if r.extra.get("label") == "median"]
    hind = [r for r in here if r.extra.get("label") == "hindsight"]
    med_k = med[0].k if med else None
    med_bias = max((r.bias_bound or 0.0 for r in med), default=0.0)
    hind_bias = [r.bias_bound or 0.0 for r in hind]
    hind_k = sorted({r.k for r in hind if r.k is not None})
    auto_r = [a for a, _ in itms.values()]
    hind_r = [h for _, h in itms.values()]
    feat_met = bool(feat) and all(v <= 0.5 for v in feat.values())
    per_eps = ", ".join(f"{v:.2f} at ε = {e:g}" for e, v in sorted(feat.items()))
    lines = [
        "\n#### Reading the ITMS-like rows against the target (dpgate <= 1/2 of the best peer)\n",
        f"- Target **{'met' if feat_met else 'not met'}** by `{FEATURED}` (a fixed public rule: "
        f"default options, no look at the errors): its MAE is {per_eps} × the best peer's. "
        f"`auto` is {min(auto_r):.2f}–{max(auto_r):.2f}× and the best dpgate mechanism in "
        f"hindsight {min(hind_r):.2f}–{max(hind_r):.2f}× the best peer's.",
        f"- Why `{FEATURED}` gets there: it clips each user's *sum* to a window "
        "`c m_l ± R` around a private centre `c` (a median of user means by the exponential "
        "mechanism, 40% of ε) with a private half-width `R` (a private scale `ρ` of the "
        "normalised residuals `|S_l - c m_l|/√m_l`, exponential mechanism with 20% of ε; "
        "`R = 0.5 ρ √m*`), then adds `Lap(Δ/(0.4 ε))`, `Δ <= 2R/n`. On these concentrated "
        "i.i.d. speeds `R` is about `0.6 σ √m*`, about a hundred km/h·records against the "
        "`U m* = 27105` a data-blind "
        "bound must allow, and clipping around a good centre is symmetric, so it costs "
        "little. The peers (and dpgate's array averaging / quantile mechanisms, noise "
        "`U/(K̄ ε)`) instead pay noise proportional to `U` itself.",
    ]
    if med:
        lines += [
            "- Why `auto` does not: it picks by *worst-case* error from the public counts "
            "alone (docs/math.md §11), among mechanisms with a data-independent bound "
            "(`centered_clip` has none on its adaptive path). On this grid dropping records "
            "can cost a lot in "
            "the worst case (the dropped records may all sit at 0 or U): a cap at the median "
            f"k = {med_k} can be off by up to {med_bias:.0f} km/h, the peers' hindsight caps "
            f"(k ∈ {{{', '.join(map(str, hind_k))}}}) by up to "
            f"{max(hind_bias, default=0.0):.0f} km/h. So `auto` keeps (almost) every record "
            "(`worst_case_optimal` or `baseline`, worst-case bias at most "
            f"{auto_bias:.2f} km/h) and pays Laplace noise of order U m*/(n ε).",
            "- The peers' hindsight k is not available to a data holder who must fix k "
            "without looking at the values, and on heterogeneous data (e.g. a few fast buses "
            "with many records) a cap's error can grow up to its worst-case bias bound above; "
            "`auto`'s cannot. `centered_clip` has no such bound either: on skewed data its "
            "centre (a median) can sit away from the mean and clipping then pulls the "
            "estimate towards it.",
            f"- Tiny grids (the CapMetrics rows, L ≈ 35 users): `{FEATURED}`'s public gate "
            "(`0.4 ε L >= 4(ln 257 + 3) ≈ 34`) is not met at these ε, so it *is* "
            "`worst_case_optimal` there (same MAE as `auto` where `auto` picks it), "
            "worse than the best dpgate mechanism in hindsight and than the peers.",
        ]
    return "\n".join(lines) + "\n"


def _role(r: Row) -> str:
    role = r.extra.get("role")
    labels = {"auto": " (auto)", "hindsight": " (best in hindsight)", "featured": " (fixed rule)"}
    return labels.get(str(role), "")
