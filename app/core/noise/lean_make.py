"""OpenDP's scalar Laplace constructor called with its arguments converted once.

A query at a new epsilon needs a new ``make_laplace`` measurement (its scale is new), and
OpenDP's Python wrapper spends ~130 µs of the ~170 µs a construction costs re-parsing the
measure's name and re-converting the domain, the metric and ``k``. :func:`lean_make_laplace`
calls the same library function, ``opendp_measurements__make_laplace``, with the same
domain, metric, ``k`` and measure, converted once: the same measurement (docs/math.md
§9.4.8). It relies on non-public ctypes bindings: :func:`lean_make_works` checks it against
the public constructor at import, and the noise source falls back to the public call.
"""

from __future__ import annotations

import ctypes

import opendp.prelude as dp

__all__ = ["lean_make_laplace", "lean_make_works"]

try:  # OpenDP's ctypes bindings (not public API: checked below, with a fallback)
    from opendp._lib import FfiResult, lib, unwrap
    from opendp.mod import Domain, Measurement, Metric

    _MAKE = ctypes.CFUNCTYPE(
        FfiResult, Domain, Metric, ctypes.c_double, ctypes.c_void_p, ctypes.c_char_p
    )(("opendp_measurements__make_laplace", lib))
    _BINDINGS = True
except (ImportError, AttributeError):  # pragma: no cover - another OpenDP layout
    _BINDINGS = False

_MEASURE = b"MaxDivergence"  # OpenDP's default ``MO``, as its wrapper passes it


def lean_make_laplace(domain: dp.Domain, metric: dp.Metric, scale: float, k: int) -> dp.Measurement:
    """``dp.m.make_laplace(domain, metric, scale, k=k)``: the same library call, its
    ``Option<i32>`` ``k`` and measure name passed as the wrapper converts them."""
    k_value = ctypes.c_int32(k)  # the wrapper's byref(c_int32(k)), alive for the call
    made: dp.Measurement = unwrap(
        _MAKE(domain, metric, float(scale), ctypes.byref(k_value), _MEASURE), Measurement
    )
    return made


def lean_make_works(domain: dp.Domain, metric: dp.Metric, k: int) -> bool:
    """Whether :func:`lean_make_laplace` builds what the public constructor builds here: the
    same privacy map at several scales and inputs, and at scale 0 (no noise: the input
    rounded to the ``2^k`` grid) the same output on several values."""
    if not _BINDINGS:
        return False
    try:
        for scale in (1.0, 0.37, 3e-3, 1234.5):
            lean = lean_make_laplace(domain, metric, scale, k)
            public = dp.m.make_laplace(domain, metric, scale, k=k)
            if any(lean.map(d) != public.map(d) for d in (0.0, 1.0, 30.0, 0.125)):  # type: ignore[no-untyped-call]
                return False
        lean0 = lean_make_laplace(domain, metric, 0.0, k)
        public0 = dp.m.make_laplace(domain, metric, 0.0, k=k)
        values = (0.1, 30.0, 7.25, 2.0**-60, 1e300, 0.0, -3.0)
        return all(lean0(v) == public0(v) for v in values)
    except Exception:  # pragma: no cover - any surprise: use the public call
        return False
