"""OpenDP's own invocation of a noisy-max measurement, without the per-call conversions.

A slot release makes one report-noisy-max choice per grid and statistic (10⁴ for an
hour of the synthetic city, 2.4·10⁵ for a day). OpenDP 0.16 has no measurement that
makes many independent noisy-max choices in one call, and building one from its
samplers costs more than the choice itself (a discrete Laplace draw is ~5 µs, a
choice ~4 µs): what costs is the Python wrapper around each call (~60 µs: it asks the
library for the measurement's input type and parses it, converts the scores through
generic paths, and reads the output's type back). :func:`invoke_noisy_max` makes the
same library calls as ``measurement(scores)`` — ``slice_as_object`` on the scores as a
``Vec<i64>``, ``measurement_invoke``, ``object_as_slice`` on the ``usize`` answer — with
the types fixed once. It is the same measurement on the same input, so each choice
has exactly the law of ``measurement(scores)`` (docs/math.md §9.4.8); independence
across calls is OpenDP's (a fresh draw from its CSPRNG per invocation).

It relies on OpenDP's ctypes bindings (``opendp._lib``, ``opendp._convert``), which are
not public API: :func:`lean_invoke_works` checks them against the public call when
this module is imported, and the noise source falls back to the public call (slower,
same law) if they are missing or disagree.
"""

from __future__ import annotations

import ctypes
from typing import Any

import opendp.prelude as dp

__all__ = ["invoke_noisy_max", "lean_invoke_works"]

try:  # OpenDP's ctypes bindings (not public API: checked below, with a fallback)
    from opendp._convert import _wrap_in_slice
    from opendp._data import object_type
    from opendp._lib import AnyObjectPtr, FfiResult, FfiSlicePtr, lib, unwrap
    from opendp.mod import Measurement

    _SLICE_AS_OBJECT = lib.opendp_data__slice_as_object
    _SLICE_AS_OBJECT.argtypes = [FfiSlicePtr, ctypes.c_char_p]
    _SLICE_AS_OBJECT.restype = FfiResult
    _INVOKE = lib.opendp_core__measurement_invoke
    _INVOKE.argtypes = [Measurement, AnyObjectPtr]
    _INVOKE.restype = FfiResult
    _OBJECT_AS_SLICE = lib.opendp_data__object_as_slice
    _OBJECT_AS_SLICE.argtypes = [AnyObjectPtr]
    _OBJECT_AS_SLICE.restype = FfiResult
    _SLICE_FREE = lib.opendp_data__slice_free
    _SLICE_FREE.argtypes = [FfiSlicePtr]
    _SLICE_FREE.restype = FfiResult
    _BINDINGS = True
except (ImportError, AttributeError):  # pragma: no cover - another OpenDP layout
    _BINDINGS = False

_VEC_I64 = b"Vec<i64>"
_USIZE = ctypes.POINTER(ctypes.c_size_t)


def invoke_noisy_max(meas: dp.Measurement, scores: list[int]) -> int:
    """``meas(scores)`` for a noisy-max measurement on ``Vec<i64>`` (scores already checked
    as Python integers that fit in 62 bits): the same library calls, types fixed once."""
    n = len(scores)
    data = (ctypes.c_int64 * n)(*scores)
    arg = unwrap(_SLICE_AS_OBJECT(_wrap_in_slice(data, n), _VEC_I64), AnyObjectPtr)
    out = unwrap(_INVOKE(meas, arg), AnyObjectPtr)
    view = unwrap(_OBJECT_AS_SLICE(out), FfiSlicePtr)
    try:
        return int(ctypes.cast(view.contents.ptr, _USIZE).contents.value)
    finally:
        unwrap(_SLICE_FREE(view), ctypes.c_void_p)


def _output_type(meas: dp.Measurement, scores: list[int]) -> Any:
    n = len(scores)
    data = (ctypes.c_int64 * n)(*scores)
    arg = unwrap(_SLICE_AS_OBJECT(_wrap_in_slice(data, n), _VEC_I64), AnyObjectPtr)
    out = unwrap(_INVOKE(meas, arg), AnyObjectPtr)
    return object_type(out)


def lean_invoke_works() -> bool:
    """Whether :func:`invoke_noisy_max` is OpenDP's own call here: the bindings exist, the
    answer is a ``usize``, and on noiseless measurements (scale 0: the argmax itself) it
    gives what the public call gives, on vectors of several lengths and signs."""
    if not _BINDINGS:
        return False
    space = (dp.vector_domain(dp.atom_domain(T="i64")), dp.linf_distance(T="i64"))
    try:
        meas = dp.m.make_noisy_max(*space, dp.max_divergence(), scale=0.0)
        if _output_type(meas, [1, 2]) != "usize":
            return False
        cases = ([5], [1, 9, 3], [-4, -2, -7, -2 - (1 << 40)], [3, 3, 8, -1, 0], [7, -9])
        return all(invoke_noisy_max(meas, list(c)) == meas(list(c)) for c in cases)
    except Exception:  # pragma: no cover - any surprise: use the public call
        return False
