"""Statistical privacy audit of a slot release's batched window path (docs/math.md §9.4.9).

The neighbours of ``test_window_audit`` (the heavy user's values all moved from 0 to U),
each released ``N`` times in **one** call of the production path a slot release takes:
``core.start_many`` on ``N`` copies of the grid (auto's window path in arrays, every
private choice one OpenDP noisy-max invocation of ``noisy_max_rows``) then
``core.finish_batch`` (OpenDP's batched Laplace). The whole output is encoded as in
``test_window_audit`` ("the estimate if the window is the most likely one, else a
sentinel") and the loss bounded from below with Clopper–Pearson intervals: it must stay
below eps. A deliberately broken copy of the batched path (its Laplace scales × 0.4)
must be caught with as many samples.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.core import finish_batch, start_many
from app.core.engine import window_batch as batch_mod
from tests.security import audit_lib as audit
from tests.security.test_window_audit import COUNTS, EPS, SENTINEL, U, _cell, _grid
from tests.unseeded import fails_only_twice

N = 30_000
ALPHA_EACH = 0.01 / 4  # two statistics, each audited and broken


def _samples(stat: str, heavy: float, cell: tuple) -> np.ndarray:
    grid = _grid(heavy, stat)
    caps = np.asarray(COUNTS, dtype=np.int64)
    pending = start_many((stat,), [grid] * N, [caps] * N, U, EPS, "auto", objective="accuracy")
    releases = finish_batch(pending).releases()
    assert {r.mechanism for r in releases} == {"user_window" if stat == "mean" else "window"}
    hit = np.array([(float(r.details["window_hi"]),) == cell for r in releases])
    return np.where(hit, [r.estimate for r in releases], SENTINEL)


@pytest.mark.slow
@pytest.mark.parametrize("stat", ["mean", "variance"])
def test_batched_window_audit_passes_and_catches_a_broken_copy(
    stat: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cell, v0, v1, scale = _cell(stat)
    edges = audit.fixed_edges(v0, v1, scale)

    def check(broken: bool) -> list[str]:
        x0, x1 = _samples(stat, 0.0, cell), _samples(stat, U, cell)
        assert min(np.mean(x0 < SENTINEL), np.mean(x1 < SENTINEL)) > 0.1
        result = audit.loss_lower_bound(x0, x1, edges, ALPHA_EACH)
        print(f"\naudit batched {stat} window (broken: {broken}): loss >= {result.bound:.3f}")
        return [] if (result.bound > EPS) == broken else [str(result)]

    fails_only_twice(lambda: check(False))  # at most eps
    right = batch_mod.calibrate_scales
    monkeypatch.setattr(batch_mod, "calibrate_scales", lambda s, e: 0.4 * right(s, e))
    fails_only_twice(lambda: check(True))  # noise scale x 0.4: above eps
