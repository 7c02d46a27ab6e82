"""A small thread-safe LRU of OpenDP measurements (building one costs more than using it)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import opendp.prelude as dp

__all__ = ["MeasurementCache"]

K = TypeVar("K", bound=Hashable)


class MeasurementCache(Generic[K]):
    """Measurements built by ``factory(key)``, the ``maxsize`` most recently used kept."""

    def __init__(self, factory: Callable[[K], dp.Measurement], maxsize: int = 512) -> None:
        self._items: OrderedDict[K, dp.Measurement] = OrderedDict()
        self._lock = threading.Lock()
        self._factory = factory
        self._maxsize = maxsize

    def get(self, key: K) -> dp.Measurement:
        with self._lock:
            meas = self._items.get(key)
            if meas is not None:
                self._items.move_to_end(key)
                return meas
        meas = self._factory(key)
        with self._lock:
            self._items[key] = meas
            if len(self._items) > self._maxsize:
                self._items.popitem(last=False)
        return meas

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
