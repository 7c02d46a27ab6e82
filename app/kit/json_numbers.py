"""Numbers in JSON bodies: ``"1_0"`` is refused, not read as 10.

Pydantic (like Python) reads a string with underscores between digits as a number, so
``{"epsilon": "1_0"}`` asked for epsilon 10. Request bodies derive from
:class:`JsonBody`, which refuses a string with an underscore in a numeric field (400
``invalid_request`` naming the field), as ``app.http.query_params`` does for query
parameters.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any

from pydantic import BaseModel, model_validator
from pydantic_core import PydanticCustomError

_NUMERIC = (int, float)


def _is_numeric(annotation: Any) -> bool:
    if annotation in _NUMERIC:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return any(_is_numeric(arg) for arg in typing.get_args(annotation))
    return False


@functools.cache
def _numeric_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(
        field.alias or name
        for name, field in model.model_fields.items()
        if _is_numeric(field.annotation)
    )


class JsonBody(BaseModel):
    """Base of every request body model (see the module's docstring)."""

    @model_validator(mode="before")
    @classmethod
    def _no_underscored_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in sorted(_numeric_fields(cls) & data.keys()):
                value = data[name]
                if isinstance(value, str) and "_" in value:
                    raise PydanticCustomError(
                        "underscored_number",
                        "{field}: {value} is not a number (write it without underscores)",
                        {"field": name, "value": repr(value[:40])},
                    )
        return data
