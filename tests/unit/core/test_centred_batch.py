"""``auto``'s centred mechanisms of many grids in arrays (app/core/engine/centred_batch.py)
are the grid-by-grid releases: on random grids, with private choices keyed by their own scores (so
the order in which grids draw them does not matter) and the same seeded Laplace noise,
every release is bit for bit what ``start_releases`` / ``finish_releases`` give grid by
grid, mixed with grids on the window path; the batch's scores are the one-grid scores."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt
import pytest

from app.core import GridData, finish_batch, finish_releases, start_many, start_releases
from app.core.data.joined import JoinedGrids
from app.core.data.window_grids import WindowGrids
from app.core.mechanisms import mean_centred as mc
from research.noise import SeededNoise, noisy_max_many
from tests.unit.core.helpers import release_fields

U = 30.0


class KeyedChoices(SeededNoise):
    """Seeded Laplace noise; each noisy max drawn from a generator keyed by its scores and
    epsilon (a grid's choice is the same whenever it is drawn)."""

    def noisy_max(self, scores: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1) -> int:
        s = np.asarray(scores, dtype=np.int64)
        key = hashlib.sha256(s.tobytes() + repr((epsilon, sensitivity)).encode()).digest()
        rng = np.random.default_rng(int.from_bytes(key[:8], "little"))
        return int(noisy_max_many(rng, s, epsilon, 1, sensitivity=sensitivity)[0])


def _grid(rng: np.random.Generator, users: int) -> tuple[GridData, np.ndarray]:
    counts = rng.choice([1, 2, 4, 5, 6, 9, 20, 60], size=users)
    centre, spread = rng.random() * U, rng.random() * 10
    values = np.clip(rng.normal(centre, spread, int(counts.sum())), 0.0, U)
    values = np.where(rng.random(values.size) < 0.05, rng.random(values.size) * U, values)
    caps = np.where(rng.random(users) < 0.2, rng.integers(0, 5, size=users), counts)
    if not np.any(caps > 0):
        caps[0] = counts[0]
    return GridData.from_counts_and_values(counts, values), caps.astype(np.int64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("statistics", [("mean",), ("variance",), ("mean", "variance")])
def test_batched_centred_releases_are_the_per_grid_releases_bit_for_bit(
    seed: int, statistics: tuple[str, ...]
) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([3, 40, 90, 200, 600, 1500], size=30)
    made = [_grid(rng, int(s)) for s in sizes]
    grids, caps = [g for g, _ in made], [c for _, c in made]
    eps = float(rng.choice([0.7, 2.0, 6.0]))
    src = KeyedChoices(np.random.default_rng(seed + 1000))
    one = []
    for g, c in zip(grids, caps, strict=True):
        one += start_releases(statistics, g, U, eps, "auto", caps=c, noise=src)
    a = finish_releases(one, src)
    src = KeyedChoices(np.random.default_rng(seed + 1000))
    many = start_many(statistics, grids, caps, U, eps, "auto", noise=src, objective="accuracy")
    b = finish_batch(many, src).releases()
    centred = {"mean": "centred_clip", "variance": "centred"}
    assert {centred[s] for s in statistics} <= {r.mechanism for r in a}
    assert len({r.mechanism for r in a}) > len(statistics)  # window grids among them
    assert [release_fields(r) for r in a] == [release_fields(r) for r in b]


def test_batch_scores_are_each_grids_own_scores() -> None:
    """Per grid, the centre scores and the width counts of the arrays are those of one
    grid alone (each a count of user-local predicates: sensitivity 1, tested one grid at
    a time in test_centred_clip.py)."""
    rng = np.random.default_rng(11)
    made = [_grid(rng, int(s)) for s in (50, 7, 300, 120)]
    joined = JoinedGrids.of([g for g, _ in made], [c for _, c in made])
    wg = WindowGrids.of(joined)
    m = wg.m.astype(np.float64)
    v = rng.random(m.size) * U * m
    cands = mc.centre_candidates(U)
    scores = mc.centre_scores(v / m, wg.grid, wg.L, cands)
    c = cands[rng.integers(0, cands.size, size=wg.L.size)]
    R = np.stack([mc.half_widths(U, 60, 0.5)] * wg.L.size) * rng.random((wg.L.size, 1))
    clipped = mc.grid_clipped(v, m, wg.grid, c, R, U)
    for g in range(wg.L.size):
        mine = slice(int(wg.start[g]), int(wg.start[g + 1]))
        want = -np.maximum(
            np.searchsorted(np.sort(v[mine] / m[mine]), cands, side="left"),
            wg.L[g] - np.searchsorted(np.sort(v[mine] / m[mine]), cands, side="right"),
        )
        assert scores[g].tolist() == want.tolist()
        assert scores[g].tolist() == mc.centre_utility(v[mine] / m[mine], cands).tolist()
        lo, hi = mc.centred_window(m[mine][:, None], U, c[g], R[g][None, :])
        outside = (v[mine][:, None] < lo) | (v[mine][:, None] > hi)
        assert clipped[g].tolist() == outside.sum(axis=0).tolist()


def test_kept_records_by_mask_are_the_gathered_ones() -> None:
    """Every user's first ``eff`` records (none where ``eff <= 0``), as a gather takes them."""
    from app.core.data.joined import offsets
    from app.core.data.window_grids import _without_tails

    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 50))
        counts = rng.integers(1, 6, n)
        caps = np.where(rng.random(n) < 0.5, counts, rng.integers(-1, 6, n))
        values = rng.random(int(counts.sum()))
        start, eff = offsets(counts)[:-1], np.minimum(counts, caps)
        on = eff > 0
        runs = [values[s : s + e] for s, e in zip(start[on], eff[on], strict=True)]
        want = np.concatenate(runs) if runs else values[:0]
        assert np.array_equal(_without_tails(values, start, eff, counts), want)
