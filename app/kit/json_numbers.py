"""Strict JSON request bodies: every body model derives from :class:`JsonBody` (pydantic's strict
mode: no ``"5"`` or ``true`` for a number; dates and tuples declared ``Strict(False)``).
:func:`parse_json` refuses duplicate keys, ``NaN``, deep nesting and malformed JSON with 400
saying what to fix."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict

__all__ = ["JsonBody", "parse_json"]


class JsonBody(BaseModel):
    """Base of every request body model (see the module's docstring)."""

    model_config = ConfigDict(strict=True)


class _Refused(ValueError):
    """A body that is JSON only to a lenient reader; the message says what to fix."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        counts = Counter(k for k, _ in pairs)
        twice = next(k for k, _ in pairs if counts[k] > 1)
        raise _Refused(
            f"the key {twice[:60]!r} appears more than once in one object: give each "
            "field once (JSON readers disagree on which value would count)"
        )
    return out


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number: give a finite number")


def _decode_error(exc: json.JSONDecodeError) -> str:
    near = exc.doc[max(0, exc.pos - 20) : exc.pos + 20]
    hint = "numbers are plain digits (1.5, 10, 2e-3), strings are in double quotes"
    if "_" in exc.doc[max(0, exc.pos - 12) : exc.pos + 12]:
        hint = "write numbers without underscores (10, not 1_0)"
    return (
        f"the body is not valid JSON: {exc.msg.lower()} at line {exc.lineno}, column "
        f"{exc.colno} (near {near!r}); {hint}"
    )


def parse_json(raw: bytes) -> Any:
    """The JSON value of a request body, or an ``HTTPException`` 400 whose detail says what
    to fix (the error handlers answer it as ``invalid_request``)."""
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except _Refused as exc:
        raise HTTPException(400, str(exc)) from None
    except json.JSONDecodeError as exc:
        raise HTTPException(400, _decode_error(exc)) from None
    except UnicodeDecodeError:
        raise HTTPException(400, "the body is not UTF-8 text: send JSON in UTF-8") from None
    except RecursionError:
        raise HTTPException(
            400,
            "the body nests arrays or objects too deeply to read: dpgate's bodies are a "
            "few levels deep (see /docs for each body's fields)",
        ) from None
