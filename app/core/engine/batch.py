"""Releases as columns: the second step every release goes through (docs/math.md §9.4.7).

:func:`app.core.engine.single_grid.start_releases` (one grid) and
:func:`app.core.start_many` (a slot's grids) leave each release at its Laplace step.
Here they are rows of a
:class:`PendingBatch`: one list per field, so that a day release's 2·10⁵ rows cost a few
list operations each instead of an object per draft, estimate and result.
:func:`finish_batch` adds the noise (independent draws, those of one scale in one OpenDP
call) and finishes every row by :func:`app.core.data.results.finished_value`, the one rule for
the estimate's range, the interval and its note. :meth:`ReleaseBatch.releases` gives the
:class:`~app.core.data.results.Release` objects of single queries and of the tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import orjson

from app.core.data.results import BiasSpread, Release, SpreadTuple, finished_value
from app.core.mechanisms.draft import PendingRelease
from app.core.noise.laplace import NoiseSource, default_noise, laplace_many

__all__ = ["PendingBatch", "ReleaseBatch", "finish_batch", "plain_details"]

_PLAIN = frozenset({int, float, str, bool, type(None)})


def plain_details(details: dict[str, object]) -> dict[str, object]:
    """``details`` as JSON values: numpy scalars and arrays become Python ones. Plain
    scalars (most details) are taken as they are; anything else goes through orjson."""
    if all(type(v) in _PLAIN for v in details.values()):
        return details
    out: dict[str, object] = orjson.loads(
        orjson.dumps(details, default=lambda o: getattr(o, "tolist", str)())
    )
    return out


@dataclass(frozen=True, eq=False)
class PendingBatch:
    """Releases whose private choices are drawn and whose Laplace noise is not yet: row
    ``i`` of every list is release ``i``. ``bias`` is the worst-case bias bound (``None``:
    none), ``spread`` a :class:`~app.core.data.results.BiasSpread` as ``(below, above, beta)``,
    ``details`` plain JSON values; every row has the value bound ``U``."""

    statistic: list[str]
    mechanism: list[str]
    epsilon: list[float]
    value: list[float]  # the noiseless estimate
    sensitivity: list[float]
    scale: list[float]  # the Laplace scale b
    bias: list[float | None]
    spread: list[SpreadTuple | None]
    kept: list[np.ndarray]
    details: list[dict[str, object]]
    U: float

    def __post_init__(self) -> None:
        n = len(self.value)
        if any(len(getattr(self, f.name)) != n for f in fields(self) if f.name != "U"):
            raise ValueError("every column of a batch needs one entry per release")

    def __len__(self) -> int:
        return len(self.value)

    @classmethod
    def of(cls, pending: Sequence[PendingRelease], U: float | None = None) -> PendingBatch:
        """The rows of per-release :class:`PendingRelease` objects (all with one ``U``)."""
        bounds = {p.U for p in pending} if U is None else {U}
        if len(bounds) > 1 or any(b != p.U for p in pending for b in bounds):
            raise ValueError("a batch has one value bound")
        return cls(
            statistic=[p.draft.statistic for p in pending],
            mechanism=[p.draft.mechanism for p in pending],
            epsilon=[p.draft.epsilon for p in pending],
            value=[p.estimate.value for p in pending],
            sensitivity=[p.estimate.sensitivity for p in pending],
            scale=[p.scale for p in pending],
            bias=[p.draft.bias for p in pending],
            spread=[_spread(p.estimate.spread) for p in pending],
            kept=[p.draft.kept for p in pending],
            details=[_details(p) for p in pending],
            U=bounds.pop() if bounds else 0.0,
        )

    @classmethod
    def concat(cls, parts: Sequence[PendingBatch], order: Sequence[int]) -> PendingBatch:
        """The rows of ``parts`` one after the other, then taken in ``order``."""
        bounds = {p.U for p in parts if len(p)}
        if len(bounds) > 1:
            raise ValueError("a batch has one value bound")
        columns = {
            f.name: [x for p in parts for x in getattr(p, f.name)]
            for f in fields(cls)
            if f.name != "U"
        }
        return cls(
            **{k: [v[i] for i in order] for k, v in columns.items()},
            U=bounds.pop() if bounds else 0.0,
        )

    @classmethod
    def interleave(cls, parts: Sequence[PendingBatch]) -> PendingBatch:
        """Row ``i`` of each part in turn, then row ``i + 1``: ``concat(parts, order)`` with
        ``order = [k·n + i for i in range(n) for k in range(len(parts))]``, each column
        filled by slice assignment."""
        if len({len(p) for p in parts}) > 1:
            raise ValueError("interleaved parts need one length")
        bounds = {p.U for p in parts if len(p)}
        if len(bounds) > 1:
            raise ValueError("a batch has one value bound")
        S = len(parts)
        columns: dict[str, list[Any]] = {}
        for f in fields(cls):
            if f.name == "U":
                continue
            out: list[Any] = [None] * (S * len(parts[0])) if parts else []
            for k, p in enumerate(parts):
                out[k::S] = getattr(p, f.name)
            columns[f.name] = out
        return cls(**columns, U=bounds.pop() if bounds else 0.0)


def _spread(s: BiasSpread | None) -> SpreadTuple | None:
    return None if s is None else (s.below, s.above, s.beta)


def _details(p: PendingRelease) -> dict[str, object]:
    return plain_details({**p.draft.details, **p.estimate.details, **(p.extra or {})})


@dataclass(frozen=True, eq=False)
class ReleaseBatch:
    """A :class:`PendingBatch` with its noise added: per row the raw noisy value and, by
    :func:`~app.core.data.results.finished_value`, the estimate in range, ``ci95`` and its note."""

    pending: PendingBatch
    raw: list[float]
    estimate: list[float]
    ci95: list[tuple[float, float] | None]
    ci95_note: list[str | None]

    def __len__(self) -> int:
        return len(self.raw)

    def worst_case_error(self) -> Iterator[float | None]:
        """``bias + b`` per row (``None`` without a bias bound)."""
        for b, s in zip(self.pending.bias, self.pending.scale, strict=True):
            yield None if b is None else b + s

    def releases(self) -> list[Release]:
        """Each row as a :class:`Release` (the same rule gives the same finished fields)."""
        p = self.pending
        spreads = [None if s is None else BiasSpread(*s) for s in p.spread]
        return [
            Release(
                statistic=p.statistic[i],
                mechanism=p.mechanism[i],
                epsilon=p.epsilon[i],
                estimate=self.raw[i],
                sensitivity=p.sensitivity[i],
                noise_scale=p.scale[i],
                worst_case_bias=p.bias[i],
                worst_case_error=err,
                kept=p.kept[i],
                value_bound=p.U,
                details=p.details[i],
                bias_spread=spreads[i],
            )
            for i, err in enumerate(self.worst_case_error())
        ]


def finish_batch(batch: PendingBatch, noise: NoiseSource | None = None) -> ReleaseBatch:
    """Add every row's Laplace noise, all draws independent, those of one scale in one
    OpenDP call (docs/math.md §9.4.7): each row has the law it would have drawn alone.
    Then finish each row by the one rule."""
    source = default_noise() if noise is None else noise
    raw = laplace_many(source, batch.value, batch.scale)
    p = batch
    done = [
        finished_value(stat, mech, value, scale, bias, spread, p.U)
        for stat, mech, value, scale, bias, spread in zip(
            p.statistic, p.mechanism, raw, p.scale, p.bias, p.spread, strict=True
        )
    ]
    return ReleaseBatch(
        pending=batch,
        raw=raw,
        estimate=[d[0] for d in done],
        ci95=[d[1] for d in done],
        ci95_note=[d[2] for d in done],
    )
