"""All SQL about API keys."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.keys.models import ApiKey


class KeyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def by_hash(self, key_hash: str) -> ApiKey | None:
        return self.session.scalars(select(ApiKey).where(ApiKey.key_hash == key_hash)).first()

    def add(self, key: ApiKey) -> ApiKey:
        self.session.add(key)
        self.session.flush()
        return key

    def spend(self, key_id: int, epsilon: Decimal) -> bool:
        """Atomically add ``epsilon`` to the key's spend unless that passes its quota."""
        result = self.session.execute(
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
