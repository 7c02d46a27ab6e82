"""A stored release's kept sets as columns instead of JSON.

``slot_releases.kept`` (bytea) held JSON, ``{grid_id: {"version": v, "users": {user: Γ}}}``:
for a day release ~10⁶ pairs, seconds to build and to parse, and a ``plan=`` query parsed
all of it to read one grid. It now holds ``app.releases.kept_sets``' format: a magic line,
a small JSON head (``grid_ids``, ``versions``) with its length, then per grid the offset of
its first pair and per pair the user id and Γ, as little-endian int64 arrays. Each row is
rewritten here, keeping every grid's users in their order, and back on downgrade (to the
compact JSON the app wrote). The format is written out here, not imported, so that this
revision does not change when the app does.

Revision ID: 0012
Revises: 0011
"""

import struct
from collections.abc import Callable, Sequence

import numpy as np
import orjson
from alembic import op
from sqlalchemy import text

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAGIC = b"dpgate-kept/1\n"
_LEN = struct.Struct("<Q")


def _columns(kept: bytes) -> bytes:
    sets = orjson.loads(kept)
    bounds, users, caps = [0], [], []
    for one in sets.values():
        users += [int(u) for u in one["users"]]
        caps += [int(c) for c in one["users"].values()]
        bounds.append(len(users))
    head = orjson.dumps({"grid_ids": list(sets), "versions": [s["version"] for s in sets.values()]})
    body = b"".join(np.asarray(a, dtype="<i8").tobytes() for a in (bounds, users, caps))
    return MAGIC + _LEN.pack(len(head)) + head + body


def _json(kept: bytes) -> bytes:
    start = len(MAGIC) + _LEN.size
    (n_head,) = _LEN.unpack_from(kept, len(MAGIC))
    head = orjson.loads(kept[start : start + n_head])
    data = np.frombuffer(kept, dtype="<i8", offset=start + n_head).tolist()
    n = len(head["grid_ids"])
    bounds, rest = data[: n + 1], data[n + 1 :]  # zip below: bounds[:n] with bounds[1:]
    users, caps = rest[: len(rest) // 2], rest[len(rest) // 2 :]
    out = {
        gid: {"version": v, "users": dict(zip(users[a:b], caps[a:b], strict=True))}
        for gid, v, a, b in zip(
            head["grid_ids"], head["versions"], bounds, bounds[1:], strict=False
        )
    }
    return orjson.dumps(out, option=orjson.OPT_NON_STR_KEYS)


def _rewrite(convert: Callable[[bytes], bytes], done: Callable[[bytes], bool]) -> None:
    conn = op.get_bind()
    ids = conn.execute(text("SELECT id FROM slot_releases ORDER BY id")).scalars().all()
    for rid in ids:  # one row at a time: a day release's kept sets are tens of MB
        kept = conn.execute(text("SELECT kept FROM slot_releases WHERE id = :i"), {"i": rid})
        value = bytes(kept.scalar_one())
        if not done(value):
            conn.execute(
                text("UPDATE slot_releases SET kept = :k WHERE id = :i"),
                {"k": convert(value), "i": rid},
            )


def upgrade() -> None:
    _rewrite(_columns, lambda kept: kept.startswith(MAGIC))


def downgrade() -> None:
    _rewrite(_json, lambda kept: not kept.startswith(MAGIC))
