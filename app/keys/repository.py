"""All SQL about API keys."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from app.keys.models import ApiKey


class KeyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def by_hash(self, key_hash: str) -> ApiKey | None:
        return self.session.scalars(select(ApiKey).where(ApiKey.key_hash == key_hash)).first()

    def get(self, key_id: int) -> ApiKey | None:
        return self.session.get(ApiKey, key_id)

    def list_all(self) -> Sequence[ApiKey]:
        return self.session.scalars(select(ApiKey).order_by(ApiKey.id)).all()

    def add(self, key: ApiKey) -> ApiKey:
        self.session.add(key)
        self.session.flush()
        return key

    def lock_active_admins(self) -> list[int]:
        """The ids of the active admin keys, locked until the transaction ends (so two
        revocations of admin keys are decided one after the other)."""
        query = select(ApiKey.id).where(ApiKey.role == "admin", ApiKey.revoked_at.is_(None))
        return list(self.session.scalars(query.with_for_update()).all())

    def revoke(self, key_id: int, when: datetime) -> None:
        self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=when)
            .execution_options(synchronize_session=False)
        )

    def spend(self, key_id: int, epsilon: Decimal) -> bool:
        """Atomically add ``epsilon`` to the key's spend unless that passes its quota."""
        result: CursorResult[Any] = self.session.execute(  # type: ignore[assignment]
            update(ApiKey)
            .where(ApiKey.id == key_id)
            .where(
                or_(
                    ApiKey.epsilon_quota.is_(None),
                    ApiKey.epsilon_spent + epsilon <= ApiKey.epsilon_quota,
                )
            )
            .values(epsilon_spent=ApiKey.epsilon_spent + epsilon)
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1

