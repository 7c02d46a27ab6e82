"""``auto``: the path chosen from public counts and ``ε`` only, and its expected error.

The rule (docs/math.md §11, measured by ``benchmarks/accuracy.py``):

* **mean**: ``centred_clip`` where the median count is at least 4 and its public gate
  opens (``0.4·ε·L >= 4(ln 257 + 3)``: enough users for its private centre), else
  ``user_window``;
* **user_mean**: its one mechanism, the Laplace mean of unit means (docs/math.md §13);
* **variance**: ``centred`` where the median count is at least 4 and its public gate
  opens (``0.4·ε·L >= 4(ln 33 + 3)``), else the ``window`` variance.

Both read only ``L``, the median count and ``ε``; every look at the values is a
private step paid out of the ``ε`` charged. :func:`expected_error` predicts the mean
absolute error of the ``auto`` answer from the counts: the Laplace scale of the peers'
capping rule (keep each user's first ``k`` = median records, exact sensitivity) times
the ratio that ``auto``'s path reached (calibrated with ``benchmarks/accuracy.py`` on
the CapMetrics days and the ITMS-like grid, median over grids).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.core.data.checks import check_bound, check_epsilon
from app.core.data.counts import CountsInfo, prepare_counts
from app.core.mechanisms.bounds import variance_sensitivities
from app.core.mechanisms.mean_centred import adaptive_gate
from app.core.mechanisms.option_spec import CENTRE_SHARE, VAR_CENTRE_SHARE
from app.core.mechanisms.variance_centred import centred_gate

__all__ = ["auto_epsilon", "auto_mechanism", "auto_path", "expected_error", "expected_errors"]

#: the centre shares auto runs with: the options' defaults (app/core/mechanisms/option_spec.py)
MEAN_CENTRE_SHARE = float(CENTRE_SHARE.default)  # type: ignore[arg-type]
VARIANCE_CENTRE_SHARE = float(VAR_CENTRE_SHARE.default)  # type: ignore[arg-type]
# Per-user second moments only concentrate (and beat the window) when users have
# several records each: real grids with median 1-2 do better with the window.
CENTRED_MIN_MEDIAN = 4

# auto's MAE / the peer rule's MAE, per path, at eps = 0.5, 1, 2: medians over grids
# measured by benchmarks/intervals.py (user_window, window: the CapMetrics days' 342 grids,
# 40 draws each; centred_clip, centred: the ITMS-like grid, 400 draws). Between them:
# linear in log eps; outside, the nearest. docs/results.md "Intervals".
_RATIO_EPS = (0.5, 1.0, 2.0)
_RATIO = {
    "user_window": (0.565, 0.673, 0.787),
    "centred_clip": (0.16, 0.13, 0.14),
    "window": (0.169, 0.255, 0.321),
    "centred": (0.43, 0.44, 0.38),
}


def _ratio(path: str, eps: float) -> float:
    x = float(np.clip(np.log2(eps), -1.0, 1.0))
    return float(np.interp(x, np.log2(_RATIO_EPS), _RATIO[path]))


def auto_mechanism(statistic: str, info: CountsInfo, eps: float) -> str:
    """The mechanism ``auto`` runs for ``statistic`` on these counts at ``eps``."""
    return auto_path(statistic, info.median(), info.n_active, eps)


def auto_path(statistic: str, median: int, n_active: int, eps: float) -> str:
    """:func:`auto_mechanism` from the median count and the number of active users."""
    if statistic == "mean":
        if median >= CENTRED_MIN_MEDIAN and adaptive_gate(n_active, MEAN_CENTRE_SHARE * eps):
            return "centred_clip"
        return "user_window"
    if statistic == "variance":
        if median >= CENTRED_MIN_MEDIAN and centred_gate(n_active, VARIANCE_CENTRE_SHARE * eps):
            return "centred"
        return "window"
    raise ValueError(f"unknown statistic {statistic!r}; use 'mean' or 'variance'")


def _peer_scales(statistic: str, k: Any, s: Any, U: float, eps: float) -> Any:
    """The peers' Laplace scale at the median count ``k`` (clipped total ``s``): one grid's
    or, elementwise, many grids'."""
    if statistic == "mean":
        return U * k / (s * eps)
    return variance_sensitivities(U, k, s) / eps


def expected_error(statistic: str, counts: npt.ArrayLike, U: float, eps: float) -> float:
    """Predicted mean absolute error of ``auto``'s answer, from public counts only."""
    return _expected(statistic, prepare_counts(counts), check_bound(U), check_epsilon(eps))


def _expected(statistic: str, info: CountsInfo, U: float, eps: float) -> float:
    if statistic == "user_mean":  # Laplace at U/(L ε), nothing clipped: E|Z| = b (§13)
        return U / (info.n_active * eps)
    k = info.median()
    s = int(info.clipped_total([k])[0])
    path = auto_path(statistic, k, info.n_active, eps)
    return _ratio(path, eps) * float(_peer_scales(statistic, k, s, U, eps))


def expected_errors(statistic: str, kept: Sequence[np.ndarray], U: float, eps: float) -> np.ndarray:
    """:func:`expected_error` of many grids (each its kept counts; zeros are users left
    out), the same floats: the median count, the users and the peers' clipped total of
    every grid in arrays, the path once per distinct (median, users)."""
    U, eps = check_bound(U), check_epsilon(eps)
    counts = [np.asarray(k, dtype=np.int64) for k in kept]
    flat = np.concatenate([np.empty(0, dtype=np.int64), *(k[k > 0] for k in counts)])
    L = np.array([np.count_nonzero(k) for k in counts], dtype=np.int64)
    if np.any(L == 0):
        raise ValueError("a grid needs at least one record")
    if statistic == "user_mean":
        out: np.ndarray = U / (L * eps)
        return out
    grid = np.repeat(np.arange(L.size, dtype=np.int64), L)
    start = np.zeros(L.size + 1, dtype=np.int64)
    np.cumsum(L, out=start[1:])
    top = np.int64(flat.max()) + 1  # each grid's counts descending: one sort of a packed key
    key = np.sort(grid * top + (top - 1 - flat))
    k = top - 1 - (key[start[:-1] + (L + 1) // 2 - 1] - np.arange(L.size) * top)
    s = np.bincount(grid, weights=np.minimum(flat, k[grid]), minlength=L.size)
    s = s.astype(np.int64)  # sums of integers below 2^53: exact
    peer = _peer_scales(statistic, k, s, U, eps)
    pairs, which = np.unique(np.stack([k, L]), axis=1, return_inverse=True)
    ratio = np.array([_ratio(auto_path(statistic, a, b, eps), eps) for a, b in pairs.T.tolist()])
    out = ratio[which.reshape(-1)] * peer
    return out


def auto_epsilon(
    statistic: str,
    counts: npt.ArrayLike,
    U: float,
    target_error: float,
    *,
    max_epsilon: float,
    min_epsilon: float,
) -> float | None:
    """The smallest ``ε`` in ``[min_epsilon, max_epsilon]`` whose :func:`expected_error`
    reaches ``target_error`` (to a relative 1e-6), or ``None`` when even ``max_epsilon``
    does not. Public counts only.

    For a fixed path the prediction falls as ``1/ε``; the path changes only where a
    public gate opens, so a scan of 256 points equally spaced in ``log ε`` finds the
    first one that reaches the target, and a bisection below it finds the crossing.
    """
    info = prepare_counts(counts)
    U = check_bound(U)
    hi_eps, lo_eps = check_epsilon(max_epsilon), check_epsilon(min_epsilon)
    target = float(target_error)
    if not np.isfinite(target) or target <= 0:
        raise ValueError(f"target error must be finite and > 0, got {target_error!r}")
    grid = np.geomspace(lo_eps, hi_eps, 256)
    ok = [_expected(statistic, info, U, float(e)) <= target for e in grid]
    if not any(ok):
        return None
    i = ok.index(True)
    if i == 0:
        return float(grid[0])
    lo, hi = float(grid[i - 1]), float(grid[i])
    while hi - lo > 1e-6 * hi:
        mid = (lo * hi) ** 0.5
        if _expected(statistic, info, U, mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi
