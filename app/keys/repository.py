"""All SQL about API keys; :func:`find_key` runs from the event loop on the query pool."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from sqlalchemy import select, update

from app.db.base import Repository
from app.keys.models import ApiKey


class KeyRepository(Repository):
    def by_hash(self, key_hash: str) -> ApiKey | None:
        return self.session.scalars(select(ApiKey).where(ApiKey.key_hash == key_hash)).first()

    def get(self, key_id: int) -> ApiKey | None:
        return self.session.get(ApiKey, key_id)

    def list_all(self) -> Sequence[ApiKey]:
        return self.session.scalars(select(ApiKey).order_by(ApiKey.id)).all()

    def lock_active_admins(self) -> list[int]:
        """The active admin keys' ids, locked (two admin revocations are decided in turn)."""
        query = select(ApiKey.id).where(ApiKey.role == "admin", ApiKey.revoked_at.is_(None))
        return list(self.session.scalars(query.with_for_update()).all())

    def revoke(self, key_id: int, when: datetime) -> None:
        self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=when)
            .execution_options(synchronize_session=False)
        )


_BY_HASH_SQL = (
    "SELECT id, name, role, key_hash, revoked_at IS NOT NULL, epsilon_quota IS NOT NULL "
    "FROM api_keys WHERE key_hash = %s"
)

#: ``(id, name, role, key_hash, revoked, has_quota)`` of a key.
KeyRow = tuple[int, str, str, str, bool, bool]


async def find_key(conn: AsyncConnection[Any], key_hash: str) -> KeyRow | None:
    """The key whose hash is ``key_hash``, if any (one read)."""
    cur = await conn.execute(_BY_HASH_SQL, (key_hash,), prepare=True)
    row = await cur.fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3], row[4], row[5])
