"""Declarative base and shared column types."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import DateTime, MetaData, Numeric, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Session

from app.budget import EPSILON_SCALE

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


#: Exact epsilon amounts (``app.budget`` rounds them before they are stored).
Epsilon = Numeric(24, EPSILON_SCALE, asdecimal=True)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes (a naive one is refused, not guessed)."""

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


_Row = TypeVar("_Row")


class Repository:
    """SQL in the caller's session (its unit of work commits, never a repository)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, row: _Row) -> _Row:
        """Insert an ORM row and flush it (its id is then known)."""
        self.session.add(row)
        self.session.flush()
        return row
