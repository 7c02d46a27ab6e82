"""The peers comparison's tables and their reading (:mod:`research.peers`, issue 7).

One :class:`Row` per system on one (grid, ``ε``); :func:`peers_report` turns them
into the markdown summary (dpgate / best peer ratios), the reading of the ITMS-like
rows against the issue's target (dpgate <= 1/2 of the best peer) and every row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.core.data.grid import GridData
from research.common import ExperimentResult, fmt, markdown_table
from research.peer_libraries import LABELS

__all__ = ["FEATURED", "Row", "peers_report"]

FEATURED = "centred_clip"  # reported on its own row: a fixed rule, not hindsight


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


def peers_report(
    rows: list[Row],
    grids: list[tuple[str, GridData, float]],
    versions: dict[str, str | None],
    runs: int,
    screen: int,
    seed: int,
    note: str,
    seconds: float,
) -> ExperimentResult:
    """The comparison's result: summary, reading, every row, and the ITMS-like checks."""
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
            "(`centred_clip` has none on its adaptive path). On this grid dropping records "
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
            "`auto`'s cannot. `centred_clip` has no such bound either: on skewed data its "
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
