"""Which database a session talks to: the one place that reads the dialect's name.

The engine (one per process, made at start-up from ``DPGATE_DATABASE_URL``) fixes
it; code that must differ per database asks here instead of testing names itself.
"""

from __future__ import annotations

import enum

from sqlalchemy import Engine
from sqlalchemy.orm import Session


class Backend(enum.Enum):
    POSTGRES = "postgresql"
    SQLITE = "sqlite"


def backend_of(target: Session | Engine) -> Backend:
    bind = target.get_bind() if isinstance(target, Session) else target
    return Backend(bind.dialect.name)
