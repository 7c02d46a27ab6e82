"""The counts of the ITMS-like single grid of seed 002 §IV (docs/math.md §7.1); its scalings
and speeds are the experiments' (``research/workloads.py``).

002 §IV-B describes one hexagon-and-timeslot of the Indian ITMS bus data by its
counts only: ``L = 217`` buses, ``m* = 417``, ``m_* = 1``, ``n = Σ m_l = 17166``,
``med(m_l) = 46``, and — with ``m_UB`` of 002 eq. 9 — ``K = 160`` WRAPAROUND and
``K̄ = 164`` BESTFIT arrays. The raw counts are not published, so
:func:`itms_counts` builds a deterministic count vector that has *all six* of
these properties exactly (checked by ``research.workloads.check_itms_counts`` in a unit test):

* ascending rank ``i = 0..216``, median position ``h = 108``;
* lower half ``c_i = round(1 + 45 (i/h)^0.87)``, upper half
  ``c_i = round(46 + 371 ((i-h)/(216-h))^3.32)``;
* then the total is brought to exactly 17166 by ±1 steps on the upper half,
  largest ranks first, never breaking the order and never touching ``m*``, the
  median or ``m_*``.

The exponents 0.87 and 3.32 were found by a one-off search so that the array
counts of eq. 9 also match. Speeds and the two scalings are as docs/math.md §7.1 states.
"""

from __future__ import annotations

import numpy as np

ITMS_L = 217
ITMS_M_MAX = 417
ITMS_M_MIN = 1
ITMS_N = 17166
ITMS_MEDIAN = 46
ITMS_MEAN = 20.66769
ITMS_VARIANCE = 115.135
ITMS_U = 65.0
ITMS_K_WRAP = 160
ITMS_K_BESTFIT = 164

_LOW_EXP = 0.87
_HIGH_EXP = 3.32


def itms_counts() -> np.ndarray:
    """The deterministic ITMS-like counts ``m_l`` (002 §IV-B), largest first, as a fresh int64
    array (the median is the 109th largest, 002 §II-A)."""
    L, h = ITMS_L, (ITMS_L - 1) // 2
    c = np.empty(L, dtype=np.float64)
    c[: h + 1] = 1.0 + (ITMS_MEDIAN - 1) * (np.arange(h + 1) / h) ** _LOW_EXP
    top = np.arange(1, L - h) / (L - 1 - h)
    c[h + 1 :] = ITMS_MEDIAN + (ITMS_M_MAX - ITMS_MEDIAN) * top**_HIGH_EXP
    asc = np.rint(c).astype(np.int64)
    diff = ITMS_N - int(asc.sum())
    step = 1 if diff > 0 else -1
    j = L - 2
    while diff:
        new = asc[j] + step
        if asc[j - 1] <= new <= asc[j + 1]:
            asc[j] = new
            diff -= step
        j = j - 1 if j - 1 > h else L - 2
    return asc[::-1].copy()
