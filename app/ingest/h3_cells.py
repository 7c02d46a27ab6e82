"""The H3 cells of many points at once, exactly as ``h3.latlng_to_cell``: the same C functions of
h3-py's extension module (``degsToRads``, ``latLngToCell``) called from a compiled loop, falling
back to h3-py where they are not exported or a point is refused."""

from __future__ import annotations

import ctypes
import itertools

import h3._cy.latlng
import h3.api.basic_int as h3i
import numpy as np
from numba import njit

__all__ = ["cells"]


def _h3_functions() -> tuple[object, object] | None:
    try:
        lib = ctypes.CDLL(h3._cy.latlng.__file__)  # already loaded: the same library
        to_cell, to_rads = lib.latLngToCell, lib.degsToRads
    except (OSError, AttributeError):
        return None
    to_cell.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)  # LatLng*, res, out*
    to_cell.restype = ctypes.c_uint32  # H3Error, 0: success
    to_rads.argtypes = (ctypes.c_double,)
    to_rads.restype = ctypes.c_double
    return to_cell, to_rads


_FUNCTIONS = _h3_functions()


def cells(lat: np.ndarray, lon: np.ndarray, res: int) -> np.ndarray:
    """The H3 cell (as an integer) of each point, degrees ``lat`` and ``lon``, at ``res``."""
    lat = np.ascontiguousarray(lat, dtype=np.float64)
    lon = np.ascontiguousarray(lon, dtype=np.float64)
    out = np.empty(lat.size, dtype=np.uint64)
    done = 0
    if _FUNCTIONS is not None:
        done = _cells(lat, lon, res, out, *_FUNCTIONS)
    if done < lat.size:  # refused by H3 (or not callable here): h3-py raises as it would
        rest = zip(lat[done:].tolist(), lon[done:].tolist(), itertools.repeat(res), strict=False)
        out[done:] = list(itertools.starmap(h3i.latlng_to_cell, rest))
    return out


@njit(cache=True, nogil=True)
def _cells(lat, lon, res, out, to_cell, to_rads):
    """Fill ``out`` with ``latLngToCell`` of each point; the number done before a refusal."""
    ll = np.empty(2, dtype=np.float64)  # an H3 LatLng: {double lat; double lng;} in radians
    for i in range(lat.size):
        ll[0] = to_rads(lat[i])
        ll[1] = to_rads(lon[i])
        if to_cell(ll.ctypes, res, out[i:].ctypes) != 0:
            return i
    return lat.size
