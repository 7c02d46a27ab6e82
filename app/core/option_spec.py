"""An option of a mechanism and a mechanism's spec: types, defaults, ranges, coercion
(the tables of every mechanism's options are :mod:`app.core.options`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["MechanismSpec", "OptionSpec", "OptionValue"]

OptionValue = str | int | float | bool | None


@dataclass(frozen=True)
class OptionSpec:
    """One option: its type (``int``, ``float``, ``bool`` or ``choice``), default and range."""

    name: str
    type: str
    default: OptionValue
    description: str
    minimum: float | None = None
    maximum: float | None = None
    exclusive: bool = False
    choices: tuple[str, ...] = ()

    def coerce(self, raw: object) -> OptionValue:
        """Return ``raw`` converted to this option's type, or raise ``ValueError``."""
        value: OptionValue
        if self.type == "bool":
            value = _to_bool(self.name, raw)
        elif self.type == "int":
            value = _to_int(self.name, raw)
        elif self.type == "float":
            value = _to_float(self.name, raw)
        else:
            value = str(raw).strip().lower()
            if value not in self.choices:
                raise ValueError(
                    f"option {self.name!r} must be one of {', '.join(self.choices)}; got {raw!r}"
                )
            return value
        if self.type in ("int", "float"):
            self._check_range(value)
        return value

    def _check_range(self, value: OptionValue) -> None:
        assert isinstance(value, int | float)
        lo, hi = self.minimum, self.maximum
        if self.exclusive:
            ok = (lo is None or value > lo) and (hi is None or value < hi)
            rng = f"({_fmt(lo)}, {_fmt(hi)})"
        else:
            ok = (lo is None or value >= lo) and (hi is None or value <= hi)
            rng = f"[{_fmt(lo)}, {_fmt(hi)}]"
        if not ok:
            raise ValueError(f"option {self.name!r} must lie in {rng}; got {value!r}")


@dataclass(frozen=True)
class MechanismSpec:
    """A mechanism's one-line description, its options and whether it has an error bound."""

    name: str
    description: str
    bounded: bool
    options: Mapping[str, OptionSpec] = field(default_factory=dict)


def _fmt(x: float | None) -> str:
    return "∞" if x is None else f"{x:g}"


def _to_bool(name: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"option {name!r} must be a boolean (true/false); got {raw!r}")


_INT64 = (-(2**63), 2**63 - 1)  # what the engine's numpy arrays hold


def _to_int(name: str, raw: object) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"option {name!r} must be an integer; got {raw!r}")
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        try:
            if not text.isascii():
                raise ValueError(text)
            value = int(text)
        except ValueError:
            raise ValueError(f"option {name!r} must be an integer; got {raw!r}") from None
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"option {name!r} must be a 64-bit integer; got {value}")
    return value


def _to_float(name: str, raw: object) -> float:
    if isinstance(raw, bool):
        raise ValueError(f"option {name!r} must be a number; got {raw!r}")
    try:
        value = float(raw) if isinstance(raw, int | float) else float(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name!r} must be a number; got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"option {name!r} must be finite; got {raw!r}")
    return value
