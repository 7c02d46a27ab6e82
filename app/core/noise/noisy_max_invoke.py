"""OpenDP's own invocation of a noisy-max measurement, without the per-call conversions.

A day release makes ~10⁵ choices; OpenDP's Python wrapper costs ~60 µs a call.
:func:`invoke_noisy_max` makes the same library calls as ``measurement(scores)`` with the
types fixed once: the same measurement on the same input, so the same law (docs/math.md
§9.4.8). It relies on non-public ctypes bindings: :func:`lean_invoke_works` checks them
against the public call at import, and the noise source falls back to the public call.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import opendp.prelude as dp

__all__ = [
    "invoke_noisy_max",
    "invoke_noisy_max_rows",
    "invoke_scalar",
    "invoke_vector",
    "lean_invoke_works",
]

try:  # OpenDP's ctypes bindings (not public API: checked below, with a fallback)
    from opendp._convert import _wrap_in_slice
    from opendp._data import object_type
    from opendp._lib import AnyObjectPtr, FfiResult, FfiSlice, FfiSlicePtr, lib, unwrap
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
    # The same four library functions typed on raw pointers, for many rows at once
    # (separate prototypes: the ones above keep OpenDP's own argtypes).
    _VP = ctypes.c_void_p
    _RAW_SLICE_AS_OBJECT = ctypes.CFUNCTYPE(FfiResult, _VP, ctypes.c_char_p)(
        ("opendp_data__slice_as_object", lib)
    )
    _RAW_INVOKE = ctypes.CFUNCTYPE(FfiResult, _VP, _VP)(("opendp_core__measurement_invoke", lib))
    _RAW_OBJECT_AS_SLICE = ctypes.CFUNCTYPE(FfiResult, _VP)(("opendp_data__object_as_slice", lib))
    _RAW_SLICE_FREE = ctypes.CFUNCTYPE(FfiResult, _VP)(("opendp_data__slice_free", lib))
    _RAW_OBJECT_FREE = ctypes.CFUNCTYPE(FfiResult, _VP)(("opendp_data__object_free", lib))
    _BINDINGS = True
except (ImportError, AttributeError):  # pragma: no cover - another OpenDP layout
    _BINDINGS = False

T = TypeVar("T")

_VEC_I64 = b"Vec<i64>"
_VEC_F64 = b"Vec<f64>"
_F64_TYPE = b"f64"
_USIZE = ctypes.POINTER(ctypes.c_size_t)
_F64 = ctypes.POINTER(ctypes.c_double)


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


def _ok(result: Any) -> int:
    """The pointer an ``FfiResult`` carries; an error is raised by OpenDP's own ``unwrap``
    (which frees it)."""
    if result.tag != 0:
        unwrap(result, ctypes.c_void_p)
        raise RuntimeError("OpenDP returned an error")  # pragma: no cover - unwrap raised
    return int(result.payload.Ok)


def invoke_noisy_max_rows(meas: dp.Measurement, rows: Any) -> list[int]:
    """:func:`invoke_noisy_max` on each row of a C-contiguous 2-d ``int64`` array (scores
    already checked to fit in 62 bits): per row the same library calls on the same
    ``Vec<i64>`` (``slice_as_object``, ``measurement_invoke``, ``object_as_slice``), the
    row read in place and every object freed at once instead of by Python finalisers."""
    n_rows, width = rows.shape
    if n_rows == 0:
        return []
    handle = ctypes.cast(meas, ctypes.c_void_p).value
    base = rows.ctypes.data
    step = rows.strides[0]
    arg_slice = FfiSlice(None, width)
    arg_ref = ctypes.addressof(arg_slice)
    out = []
    for i in range(n_rows):
        arg_slice.ptr = base + i * step
        arg = _ok(_RAW_SLICE_AS_OBJECT(arg_ref, _VEC_I64))
        try:
            answer = _ok(_RAW_INVOKE(handle, arg))
        finally:
            _ok(_RAW_OBJECT_FREE(arg))
        try:
            view = _ok(_RAW_OBJECT_AS_SLICE(answer))
            out.append(_usize_at(FfiSlice.from_address(view).ptr).value)
            _ok(_RAW_SLICE_FREE(view))
        finally:
            _ok(_RAW_OBJECT_FREE(answer))
    return out


def _invoke_on_slice(
    meas: dp.Measurement, address: int, size: int, type_name: bytes, read: Callable[[Any], T]
) -> T:
    """``meas`` invoked on the ``size`` values at ``address`` as ``type_name`` (the library
    calls of the public call: ``slice_as_object``, ``measurement_invoke``,
    ``object_as_slice``), the answer's slice handed to ``read``; every object freed."""
    arg_slice = FfiSlice(address, size)
    arg = _ok(_RAW_SLICE_AS_OBJECT(ctypes.addressof(arg_slice), type_name))
    try:
        answer = _ok(_RAW_INVOKE(ctypes.cast(meas, ctypes.c_void_p).value, arg))
    finally:
        _ok(_RAW_OBJECT_FREE(arg))
    try:
        view = _ok(_RAW_OBJECT_AS_SLICE(answer))
        got = read(FfiSlice.from_address(view))
        _ok(_RAW_SLICE_FREE(view))
    finally:
        _ok(_RAW_OBJECT_FREE(answer))
    return got


def invoke_vector(meas: dp.Measurement, values: np.ndarray) -> np.ndarray:
    """``meas(values)`` for a measurement on ``Vec<f64>`` with a ``Vec<f64>`` answer (the
    Laplace vector measurement): the public call's library calls on the array's own buffer
    instead of a Python list converted element by element; the answer copied out."""
    data = np.ascontiguousarray(values, dtype=np.float64)
    if data.size == 0:
        return data.copy()

    def read(out: Any) -> np.ndarray:
        if out.len != data.size:
            raise RuntimeError("OpenDP's answer has another length")
        got: np.ndarray = np.ctypeslib.as_array(ctypes.cast(out.ptr, _F64), shape=(out.len,))
        return got.copy()

    return _invoke_on_slice(meas, data.ctypes.data, data.size, _VEC_F64, read)


def invoke_scalar(meas: dp.Measurement, value: float) -> float:
    """``meas(value)`` for a measurement on ``f64`` with an ``f64`` answer (the scalar
    Laplace measurement): OpenDP's own conversion of a scalar (a one-element ``f64``
    slice) with the types fixed once instead of parsed per call."""
    data = ctypes.c_double(value)
    return _invoke_on_slice(
        meas, ctypes.addressof(data), 1, _F64_TYPE,
        lambda out: float(ctypes.c_double.from_address(out.ptr).value),
    )  # fmt: skip


def _usize_at(address: int) -> Any:
    return ctypes.c_size_t.from_address(address)


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
        if not all(invoke_noisy_max(meas, list(c)) == meas(list(c)) for c in cases):
            return False
        rows = np.array([[3, 3, 8, -1, 0], [-4, -2, -7, -9, -2 - (1 << 40)], [9, 1, 2, 3, 4]])
        if invoke_noisy_max_rows(meas, rows) != [meas(r) for r in rows.tolist()]:
            return False
        # Laplace on float vectors at scale 0: the input rounded to its grid, both ways
        values = np.array([0.1, 30.0, 7.25, 2.0**-60, 1e300, 0.0, 3.0])
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=values.size)
        lap = dp.m.make_laplace(domain, dp.l1_distance(T=float), 0.0, k=-100)
        if invoke_vector(lap, values).tolist() != lap(values.tolist()):
            return False
        one = dp.m.make_laplace(
            dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), 0.0, k=-100
        )
        return all(invoke_scalar(one, v) == one(v) for v in values.tolist())
    except Exception:  # pragma: no cover - any surprise: use the public call
        return False
