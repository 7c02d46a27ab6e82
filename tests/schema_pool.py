"""Test schemas made and dropped beside the tests, not in their set-up and teardown.

A copy of the template is mostly the server syncing the files of its ~50 new indexes
(a btree build syncs its file), and a drop is mostly unlinking them: waits on the disk
more than work. Each xdist worker therefore has two threads: one keeps a few copies
ready, the other drops the schemas the tests are done with. A test still gets a copy of
its own, made before it started and never used by another test.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable

#: A schema made: its URL (``search_path`` set) and its name.
Made = tuple[str, str]


class SchemaPool:
    def __init__(self, make: Callable[[], Made], drop: Callable[[str], None], ready: int) -> None:
        self._make, self._drop, self._depth = make, drop, ready
        self._ready: deque[Made] = deque()
        self._done: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._closing = False
        self._error: BaseException | None = None
        self._threads = [
            threading.Thread(target=self._making, name="test-schemas-make", daemon=True),
            threading.Thread(target=self._dropping, name="test-schemas-drop", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def take(self) -> Made:
        """A fresh schema, waiting for one if none is ready."""
        with self._cond:
            while not self._ready and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise RuntimeError("a test schema could not be made or dropped") from self._error
            made = self._ready.popleft()
            self._cond.notify_all()
            return made

    def drop_later(self, schema: str) -> None:
        """Drop ``schema`` (no longer used by anyone) in the background."""
        self._done.put(schema)

    def close(self) -> None:
        """Stop making, drop what is left (used and unused), and raise a failure of
        either thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._done.put(None)
        for thread in self._threads:
            thread.join()
        for _, schema in self._ready:
            self._drop(schema)
        if self._error is not None:
            raise RuntimeError("a test schema could not be made or dropped") from self._error

    def _failed(self, error: BaseException) -> None:
        with self._cond:
            self._error = error
            self._cond.notify_all()

    def _making(self) -> None:
        while True:
            with self._cond:
                while not self._closing and len(self._ready) >= self._depth:
                    self._cond.wait()
                if self._closing:
                    return
            try:
                made = self._make()
            except BaseException as error:
                self._failed(error)
                return
            with self._cond:
                self._ready.append(made)
                self._cond.notify_all()

    def _dropping(self) -> None:
        while (schema := self._done.get()) is not None:
            try:
                self._drop(schema)
            except BaseException as error:
                self._failed(error)
                return
