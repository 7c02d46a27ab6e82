"""The one parser of numeric ids in paths: ASCII digits without sign, spaces or leading zeros, in
``[1, 2^31 - 1]``; any other spelling is 404, so a resource has one address. Routes declare
``{key_id:id}``, so ``/keys/me`` is never an id."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Path
from starlette.convertors import StringConvertor, register_url_convertor

from app.kit.errors import NotFound

MAX_ID = 2**31 - 1
_CANONICAL = re.compile(r"[1-9][0-9]{0,9}")  # re.ASCII is implied by the explicit class


class _DigitsConvertor(StringConvertor):
    """A path segment of ASCII digits (``{key_id:id}``); :func:`parse_path_id` checks it."""

    regex = "[0-9]+"


register_url_convertor("id", _DigitsConvertor())


def parse_path_id(text: str | int, what: str = "resource") -> int:
    """``text`` as an id, or ``NotFound`` when it is not the id's one spelling."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif isinstance(text, str) and _CANONICAL.fullmatch(text):
        value = int(text)
    else:
        raise NotFound(
            f"no {what} {str(text)[:40]!r}: ids are ASCII digits without sign, spaces or "
            "leading zeros (e.g. 7)"
        )
    if not 1 <= value <= MAX_ID:
        raise NotFound(f"no {what} {value}")
    return value


_DESCRIPTION = "A positive integer in ASCII digits, without sign or leading zeros."


def _dataset_id(dataset_id: Annotated[str, Path(description=_DESCRIPTION)]) -> int:
    return parse_path_id(dataset_id, "dataset")


def _key_id(key_id: Annotated[str, Path(description=_DESCRIPTION)]) -> int:
    return parse_path_id(key_id, "key")


#: A path's ``{dataset_id}``, parsed by :func:`parse_path_id`.
DatasetId = Annotated[int, Depends(_dataset_id)]
#: A path's ``{key_id}``, parsed by :func:`parse_path_id`.
KeyId = Annotated[int, Depends(_key_id)]
