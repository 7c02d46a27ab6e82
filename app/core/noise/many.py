"""Many draws at once: exact scale calibration in arrays and noisy maxes of many grids.

Both serve a slot release's batched path (docs/math.md §9.4.9); each result is the one
the per-draw function gives (:func:`app.core.noise.laplace.calibrate_scale`, one
:meth:`NoiseSource.noisy_max` per row).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from app.core.noise.laplace import LAPLACE_GRID, NoiseSource, _check_eps, calibrate_scale

__all__ = ["calibrate_scales", "noisy_max_rows"]

_SPLIT = 134217729.0  # 2^27 + 1: Veltkamp's split of a double into two 26-bit halves
_SAFE_LO, _SAFE_HI = 2.0**-400, 2.0**400  # no under- or overflow in the exact product


def _product_error(a: np.ndarray, b: float, p: np.ndarray) -> np.ndarray:
    """``a·b - p`` exactly, for ``p = fl(a·b)`` (Dekker's TwoProduct; exact without under-
    or overflow, which :func:`calibrate_scales` guarantees by its range test)."""
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    out: np.ndarray = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return out


def calibrate_scales(sensitivities: npt.ArrayLike, epsilon: float) -> np.ndarray:
    """:func:`calibrate_scale` of each sensitivity at one ``epsilon``, vectorised and exact.

    With ``Δ⁺`` the padded sensitivity (:func:`app.core.noise.laplace.padded_sensitivity`, the same
    two float operations), ``q = fl(Δ⁺/ε)`` is within one step of the answer: it is the
    answer iff ``q·ε >= Δ⁺`` exactly, else the next float up. The test is exact in floats:
    ``q·ε = p + e`` with ``p = fl(q·ε)`` and ``e`` from Dekker's TwoProduct, and ``p - Δ⁺``
    is exact (Sterbenz: ``p`` is within a factor 2 of ``Δ⁺``), so ``q·ε >= Δ⁺`` iff
    ``p - Δ⁺ >= -e``. Outside the range where these steps cannot under- or overflow,
    :func:`calibrate_scale` itself."""
    raw = np.array(sensitivities, dtype=np.float64, copy=True).reshape(-1)
    eps = float(epsilon)
    _check_eps(eps)
    if not np.all(np.isfinite(raw)) or np.any(raw < 0):
        raise ValueError("sensitivities must be finite and >= 0")
    with np.errstate(all="ignore"):  # out of the safe range: recomputed below
        s = np.nextafter(raw + LAPLACE_GRID, np.inf)  # Δ⁺ (docs/math.md §9.2)
        q = s / eps
        p = q * eps
        exact_ok = (p - s) >= -_product_error(q, eps, p)
        out = np.where(exact_ok, q, np.nextafter(q, np.inf))
    safe = (s >= _SAFE_LO) & (s <= _SAFE_HI) & (q >= _SAFE_LO) & (q <= _SAFE_HI)
    if not _SAFE_LO <= eps <= _SAFE_HI:
        safe[:] = False
    out[raw == 0.0] = 0.0
    for i in np.flatnonzero(~safe & (raw != 0.0)).tolist():
        out[i] = calibrate_scale(float(raw[i]), eps)
    return out


def noisy_max_rows(
    source: NoiseSource, parts: Sequence[tuple[np.ndarray, float]]
) -> list[np.ndarray]:
    """For each ``(scores, ε)`` in ``parts``, the noisy max (sensitivity 1) of every row.

    With OpenDP's source each row is one invocation of the certified measurement
    (:meth:`OpenDPNoise.noisy_max_rows`); with any other source (seeded research sources)
    row ``i`` of every part is drawn before row ``i + 1`` of any, the order in which a
    grid-by-grid release draws them."""
    rows = getattr(source, "noisy_max_rows", None)
    if rows is not None:
        return [np.asarray(rows(s, e), dtype=np.int64) for s, e in parts]
    n = {int(s.shape[0]) for s, _ in parts}
    if len(n) > 1:
        raise ValueError("every part needs one row per grid")
    out = [np.empty(s.shape[0], dtype=np.int64) for s, _ in parts]
    for i in range(n.pop() if n else 0):
        for k, (s, e) in enumerate(parts):
            out[k][i] = source.noisy_max(s[i], e, sensitivity=1)
    return out
