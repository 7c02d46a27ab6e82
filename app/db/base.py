"""Declarative base and shared column types."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_CEILING, Decimal
from typing import Any

from sqlalchemy import BigInteger, DateTime, MetaData, Numeric, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

EPSILON_SCALE = 12
EPSILON_QUANTUM = Decimal(1).scaleb(-EPSILON_SCALE)

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def to_epsilon(value: float | Decimal | str) -> Decimal:
    """An epsilon as an exact decimal with 12 places, rounded **up** (charging more is safe)."""
    return Decimal(str(value) if isinstance(value, float) else value).quantize(
        EPSILON_QUANTUM, rounding=ROUND_CEILING
    )


class PicoEpsilon(TypeDecorator[Decimal]):
    """SQLite has no exact decimal: store epsilon as an integer count of 1e-12 units."""

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> int | None:
        if value is None:
            return None
        return int(to_epsilon(value).scaleb(EPSILON_SCALE))

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        return Decimal(int(value)).scaleb(-EPSILON_SCALE).quantize(EPSILON_QUANTUM)


#: Exact epsilon amounts: ``NUMERIC(24, 12)`` on Postgres, integer pico-units on SQLite.
Epsilon = Numeric(24, EPSILON_SCALE, asdecimal=True).with_variant(PicoEpsilon(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every dialect (SQLite drops the offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)
