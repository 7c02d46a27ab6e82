"""An adaptive partition of a slot's records into H3 cells of several resolutions, chosen
from public occupancy only (docs/math.md §6.6).

Every occupied fine cell's records go to exactly one released cell (itself or an ancestor
no coarser than ``coarsest``) with at least ``min_users`` users, else nowhere. A tree
dynamic programme over each coarsest cell releases a node whole or splits it, maximising
``r · (1 + [public ci95 width <= useful_width] + fine_weight · (res - coarsest)/span)``
over the released cells (``r`` records; the width at the nominal per-statistic ``ε`` is
the widest of the statistics asked: ``capped_weights``' for the record statistics,
§5.12, and ``user_mean``'s, §13).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from app.core.data.counts import prepare_counts
from app.core.data.joined import offsets
from app.core.data.occupancy import distinct
from app.core.mechanisms.mean_capped import capped_half_widths
from app.core.mechanisms.user_mean import user_mean_public

__all__ = [
    "AdaptivePartition",
    "PartitionTree",
    "adaptive_partition",
    "narrowest_width",
    "user_mean_widths",
]

ParentOf = Callable[[int, int], int]
#: ``φ``: how much more a record is worth per level of resolution (over the span)
FINE_WEIGHT = 0.5


@dataclass(frozen=True)
class AdaptivePartition:
    """``released``: cell → resolution; ``cell_of``: fine cell → its released cell (fine
    cells absent from it are skipped); the shares of records and users covered."""

    released: dict[int, int]
    cell_of: dict[int, int]
    skipped: list[int]
    record_share: float
    user_share: float
    widths: dict[int, float] = field(default_factory=dict)


def narrowest_width(
    counts: npt.ArrayLike, U: float, eps: float, caps: npt.ArrayLike | None = None
) -> float:
    """The narrowest honest ci95 width of a mean over these per-user counts, with each
    user's kept count capped at ``caps`` (0: suppressed) if given (public)."""
    info = prepare_counts(np.asarray(counts, dtype=np.int64), caps)
    if not info.active.any():
        return float(U)
    # the half-width at interval_k's choice: the least over the same candidates
    ks = np.arange(info.m_min, info.m_max + 1, dtype=np.int64)
    half = float(capped_half_widths(info, U, eps, ks).min())
    return min(U, 2.0 * half)


@dataclass
class _Node:
    cell: int
    res: int
    counts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # per user
    users: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # their ids
    children: list[int] = field(default_factory=list)
    fine: list[int] = field(default_factory=list)  # fine cells below (or itself)


def _per_user(
    ancestors: np.ndarray, users: np.ndarray, counts: np.ndarray
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each ancestor's (users, their records) (one entry per user with records below it)."""
    order = np.lexsort((users, ancestors))
    a, u, c = ancestors[order], users[order], counts[order]
    new_pair = np.ones(a.size, dtype=bool)
    new_pair[1:] = (a[1:] != a[:-1]) | (u[1:] != u[:-1])
    starts = np.flatnonzero(new_pair)
    pair_anc, pair_user, pair_count = a[starts], u[starts], np.add.reduceat(c, starts)
    new_node = np.ones(pair_anc.size, dtype=bool)
    new_node[1:] = pair_anc[1:] != pair_anc[:-1]
    bounds = np.append(np.flatnonzero(new_node), pair_anc.size)
    return {
        int(pair_anc[lo]): (pair_user[lo:hi], pair_count[lo:hi])
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
    }


@dataclass(frozen=True)
class PartitionTree:
    """Every occupied fine cell with its ancestors down to ``coarsest``, and each node's
    records per user: built once, then :meth:`choose` at any ``ε``."""

    nodes: dict[int, _Node]
    roots: list[int]
    finest: int
    coarsest: int
    cells: np.ndarray  # the rows' fine cells
    users: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(
        cls,
        fine_cells: npt.ArrayLike,
        users: npt.ArrayLike,
        counts: npt.ArrayLike,
        *,
        finest: int,
        coarsest: int,
        parent_of: ParentOf,
    ) -> PartitionTree:
        cells = np.asarray(fine_cells, dtype=np.int64)
        who = np.asarray(users, dtype=np.int64)
        n = np.asarray(counts, dtype=np.int64)
        if not (cells.size == who.size == n.size) or np.any(n <= 0):
            raise ValueError("occupancy rows need a fine cell, a user and a positive count each")
        if not 0 <= coarsest <= finest:
            raise ValueError(f"need 0 <= coarsest <= finest, got {coarsest} and {finest}")
        uniq, inverse = np.unique(cells, return_inverse=True)
        chains = [
            [f] + [parent_of(f, r) for r in range(finest - 1, coarsest - 1, -1)]
            for f in uniq.tolist()
        ]
        nodes: dict[int, _Node] = {}
        for chain in chains:
            for depth, cell in enumerate(chain):
                node = nodes.setdefault(cell, _Node(cell, finest - depth))
                node.fine.append(chain[0])
                if depth > 0 and chain[depth - 1] not in node.children:
                    node.children.append(chain[depth - 1])
        for depth in range(finest - coarsest + 1):
            level = np.array([chain[depth] for chain in chains], dtype=np.int64)
            for cell, (ids, per_user) in _per_user(level[inverse], who, n).items():
                nodes[cell].users, nodes[cell].counts = ids, per_user
        roots = sorted({chain[-1] for chain in chains})
        return cls(nodes, roots, finest, coarsest, cells, who, n)

    def choose(
        self,
        *,
        min_users: int,
        U: float,
        eps: float,
        useful_width: float | None = None,
        fine_weight: float = FINE_WEIGHT,
        statistics: tuple[str, ...] = ("mean",),
    ) -> AdaptivePartition:
        """The partition of the module docstring at ``eps`` (per statistic)."""
        if min_users < 1:
            raise ValueError(f"min_users must be >= 1, got {min_users}")
        useful = 0.2 * U if useful_width is None else float(useful_width)
        span = max(self.finest - self.coarsest, 1)
        widths: dict[int, float] = {}
        nodes = self.nodes
        unit_widths: dict[int, float] = {}
        if "user_mean" in statistics:  # every candidate's at once
            big = [c for c, node in nodes.items() if node.counts.size >= min_users]
            got = user_mean_widths([nodes[c].counts for c in big], U, eps)
            unit_widths = dict(zip(big, got.tolist(), strict=True))
        records_asked = any(s != "user_mean" for s in statistics)

        def width_of(cell: int) -> float:
            node = nodes[cell]
            width = narrowest_width(node.counts, U, eps) if records_asked else 0.0
            return max(width, unit_widths.get(cell, 0.0))

        def best(cell: int) -> tuple[float, list[int]]:
            """(worth, released cells) of the best decision for the subtree at ``cell``."""
            node = nodes[cell]
            whole, chosen = 0.0, []
            if node.counts.size >= min_users:
                width = width_of(cell)
                widths[cell] = width
                records = float(node.counts.sum())
                fineness = fine_weight * (node.res - self.coarsest) / span
                whole, chosen = records * (1.0 + (width <= useful) + fineness), [cell]
            if node.children:
                split, parts = 0.0, []
                for child in node.children:
                    worth, got = best(child)
                    split += worth
                    parts += got
                if split > whole:
                    return split, parts
            return whole, chosen

        released: dict[int, int] = {}
        for root in self.roots:
            released.update({c: nodes[c].res for c in best(root)[1]})
        cell_of = {f: c for c in released for f in nodes[c].fine}
        cells, who, n = self.cells, self.users, self.counts
        skipped = sorted(set(cells.tolist()) - set(cell_of))
        kept_rows = np.isin(cells, np.fromiter(cell_of, dtype=np.int64, count=len(cell_of)))
        record_share = float(n[kept_rows].sum() / n.sum()) if n.size else 0.0
        every = distinct(who).size
        user_share = float(distinct(who[kept_rows]).size / every) if every else 0.0
        return AdaptivePartition(
            released, cell_of, skipped, record_share, user_share, {c: widths[c] for c in released}
        )


def user_mean_widths(counts: list[np.ndarray], U: float, eps: float) -> np.ndarray:
    """``user_mean``'s public ci95 width of each cell (its units' counts, nothing capped)."""
    if not counts:
        return np.empty(0)
    joined = np.concatenate(counts).astype(np.int64)
    pairs = offsets(np.array([c.size for c in counts], dtype=np.int64))
    out: np.ndarray = user_mean_public(joined, joined, pairs, U, eps).width
    return out


def adaptive_partition(
    fine_cells: npt.ArrayLike,
    users: npt.ArrayLike,
    counts: npt.ArrayLike,
    *,
    finest: int,
    coarsest: int,
    min_users: int,
    U: float,
    eps: float,
    parent_of: ParentOf,
    useful_width: float | None = None,
    fine_weight: float = FINE_WEIGHT,
    statistics: tuple[str, ...] = ("mean",),
) -> AdaptivePartition:
    """The partition of the module docstring for occupancy rows ``(fine cell, user, count)``.

    ``useful_width`` defaults to 20% of ``U`` (a ci95 at most that wide is "useful")."""
    if min_users < 1:
        raise ValueError(f"min_users must be >= 1, got {min_users}")
    tree = PartitionTree.of(
        fine_cells, users, counts, finest=finest, coarsest=coarsest, parent_of=parent_of
    )
    return tree.choose(
        min_users=min_users,
        U=U,
        eps=eps,
        useful_width=useful_width,
        fine_weight=fine_weight,
        statistics=statistics,
    )
