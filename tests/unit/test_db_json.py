"""JSON columns are written with orjson (``app.db.engine.json_dumps``): the same JSON
values as ``json.dumps`` would write, for what dpgate stores."""

from __future__ import annotations

import json

import pytest

from app.db.engine import json_dumps


@pytest.mark.parametrize(
    "value",
    [
        {"grids": [{"mean": {"estimate": 6.25, "ci95": [1.0, 29.5]}, "h3_cell": "872a10"}]},
        {"users": {"17": 3, "4": 1}, "version": 2},
        {1: "int keys become strings", "é": ["ünïcode", None, True, 1e-300, -0.0]},
        [0, 2**62, 1.7976931348623157e308],
    ],
)
def test_the_same_json_as_the_standard_library(value: object) -> None:
    assert json.loads(json_dumps(value)) == json.loads(json.dumps(value))


def test_what_json_cannot_hold_is_refused() -> None:
    with pytest.raises(TypeError):
        json_dumps({"x": object()})
