"""An option of a mechanism and a mechanism's spec: types, defaults, ranges, coercion
and every option, declared once (the mechanisms that take them:
:mod:`app.core.mechanisms.registry`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.data.counts import CountsInfo
    from app.core.mechanisms.draft import Draft

__all__ = ["Builder", "MechanismSpec", "OptionSpec", "OptionValue"]

OptionValue = str | int | float | bool | None
Builder = Callable[["CountsInfo", float, float, dict[str, OptionValue]], "Draft"]


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
    #: the mechanism's constructor: its :class:`~app.core.mechanisms.draft.Draft` from public counts
    #: (``None``: ``auto`` and the joint mechanisms, built by :mod:`app.core.mechanisms.registry`)
    build: Builder | None = None


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


# Every option of every mechanism, declared once.

FILL = OptionSpec(
    "user_mean_fill",
    "bool",
    True,
    "replace each record a user contributes by that user's mean (002 §IV-A, 003 §IV)",
)
M_UB_MEDIAN = OptionSpec(
    "m_ub",
    "int",
    None,
    "array length m_UB in [m_*, m*]; default the median count (002 §III-C)",
    minimum=1,
)
M_UB_EQ9 = OptionSpec(
    "m_ub",
    "int",
    None,
    "array length m_UB in [m_*, m*]; default 002 eq. 9",
    minimum=1,
)
M_CLIP = OptionSpec(
    "m",
    "int",
    None,
    "keep each user's earliest m records; default the error-minimising m",
    minimum=1,
)
GAMMA = OptionSpec(
    "gamma",
    "float",
    0.2,
    "failure probability γ of the concentration radius τ (002 eq. 7)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
RULE = OptionSpec(
    "rule",
    "choice",
    "exact",
    "exact: smallest minimiser of eq. 19; paper: 002 Lemma VI.2's procedure literally",
    choices=("exact", "paper"),
)
CENTRE_SHARE = OptionSpec(
    "centre_share",
    "float",
    0.4,
    "share of eps for the private centre (exponential mechanism on user means)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
WIDTH_SHARE = OptionSpec(
    "width_share",
    "float",
    0.2,
    "share of eps for the private width (centre_share + width_share < 1)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
WIDTH_FACTOR = OptionSpec(
    "width_factor",
    "float",
    0.5,
    "half-width R = width_factor x private residual scale rho x sqrt(m*)",
    minimum=0.0,
    maximum=1e6,
    exclusive=True,
)
WINDOW_SHARE = OptionSpec(
    "window_share",
    "float",
    0.2,
    "share of eps for the private window [0, b] over the user means (noisy max)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
CAP_K = OptionSpec(
    "k",
    "int",
    None,
    "weight each user up to k records; default the k with the narrowest honest ci95",
    minimum=1,
)
OBJECTIVE = OptionSpec(
    "objective",
    "choice",
    "accuracy",
    "accuracy: the most accurate path, its ci95 honest but wide where it clips privately; "
    "interval: the bounded mechanism whose honest ci95 is the narrowest (public counts)",
    choices=("accuracy", "interval"),
)
VAR_WINDOW_SHARE = OptionSpec(
    "window_share",
    "float",
    0.2,
    "share of eps for the private clipping bound b of the records (noisy max)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
VAR_CENTRE_SHARE = OptionSpec(
    "centre_share",
    "float",
    0.4,
    "share of eps for the private centre (median of user means, 33 candidates)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
MOMENT_SHARE = OptionSpec(
    "moment_share",
    "float",
    0.1,
    "share of eps for the private clip level of per-user second moments "
    "(centre_share + moment_share < 1)",
    minimum=0.0,
    maximum=1.0,
    exclusive=True,
)
SPLIT = OptionSpec(
    "split",
    "choice",
    "half",
    "budget split between mean and variance: eps/2 each or the optimal split (docs/math.md §4.3)",
    choices=("half", "optimal"),
)

AUTO_SPLIT = OptionSpec(
    "split",
    "choice",
    "half",
    "budget split between mean and variance: eps/2 each (auto has no worst-case bound "
    "to optimise a split on)",
    choices=("half",),
)
