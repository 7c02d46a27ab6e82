"""The slice of a numpy ``Generator`` that :mod:`app.synth` calls: the caller (an experiment, a
test, a benchmark, the demo) passes a seeded one, never this package (docs/math.md §7)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["SynthRandom"]


class SynthRandom(Protocol):
    """The methods of a numpy ``Generator`` that :mod:`app.synth` calls."""

    def random(self, size: Any = ...) -> Any: ...

    def normal(self, loc: Any = ..., scale: Any = ..., size: Any = ...) -> Any: ...

    def integers(self, low: Any, high: Any = ..., size: Any = ...) -> Any: ...

    def choice(self, a: Any, size: Any = ..., replace: bool = ..., p: Any = ...) -> Any: ...

    def dirichlet(self, alpha: Any, size: Any = ...) -> Any: ...

    def multinomial(self, n: Any, pvals: Any, size: Any = ...) -> Any: ...

    def geometric(self, p: Any, size: Any = ...) -> Any: ...
