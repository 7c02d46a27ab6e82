"""Real answers for the documentation: a tiny fixed synthetic grid released with
dpgate's own sampler, once per process, on first use."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from app import core
from app.answers.body import answer_body
from app.answers.epsilon import parse_epsilon

EXAMPLE_U = 65.0
EXAMPLE_EPSILON = 1.0
#: 40 buses, 1 to 8 speed records each, speeds in [0, 65) km/h, fixed (not random).
EXAMPLE_USERS = [[float((7 * u + 11 * r) % 60 + 3) for r in range(1 + u % 8)] for u in range(40)]
EXAMPLE_GRID_ID = "g_example"
#: Where the example grid is: an H3 cell in Pune at resolution 8, and its slot.
EXAMPLE_WHERE = {"h3_cell": "88608850e9fffff", "slot_start": "2024-03-05T10:00:00+05:30"}


@dataclass(frozen=True)
class _ExampleGrid:
    id: int = 0
    public_id: str = EXAMPLE_GRID_ID
    version: int = 1


@cache
def example_answer(statistic: str) -> dict[str, Any]:
    """A real ``auto`` answer (ε = 1) of the example grid, made once per process."""
    grid = core.GridData.from_user_values(EXAMPLE_USERS)
    release = core.release(statistic, grid, EXAMPLE_U, EXAMPLE_EPSILON, "auto")
    eps = parse_epsilon(EXAMPLE_EPSILON)
    options = core.validate_options(statistic, "auto", {})
    return answer_body(
        _ExampleGrid(),
        statistic,
        "auto",
        eps,
        options,
        release,
        1,
        privacy_unit="user",
        unit="m/s",
        where=EXAMPLE_WHERE,
    )
