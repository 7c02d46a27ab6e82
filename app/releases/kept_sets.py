"""Who a stored release kept where: the ``kept`` bytes of a ``slot_releases`` row.

A later single-grid query may reuse a release's plan (``plan=<release id>``): it needs the
grid's snapshot version and each user's kept count Γ there. Stored as columns (migration
0012): ``MAGIC``, the length of a JSON head (``grid_ids``, ``versions``) as 8 bytes
little-endian, the head, then three little-endian int64 arrays: per grid the offset of its
first pair (one more entry than grids), and per kept pair the user id and Γ. A day release
keeps ~10⁶ pairs: writing them is a few array copies, and reading one grid slices them.
Migration 0012 rewrote the JSON of earlier rows (``{grid_id: {"version": v, "users":
{user: Γ}}}``) in this format.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

__all__ = ["MAGIC", "KeptSets", "kept_caps"]

MAGIC = b"dpgate-kept/1\n"
_LEN = struct.Struct("<Q")


@dataclass(frozen=True, eq=False)
class KeptSets:
    """Per released grid (public id, snapshot version) its kept users and their Γ > 0:
    pairs ``bounds[i]:bounds[i + 1]`` of ``users``/``caps`` belong to grid ``i``."""

    grid_ids: Sequence[str]
    versions: Sequence[int]
    bounds: np.ndarray
    users: np.ndarray
    caps: np.ndarray

    def to_bytes(self) -> bytes:
        head = orjson.dumps({"grid_ids": list(self.grid_ids), "versions": list(self.versions)})
        arrays = (self.bounds, self.users, self.caps)
        body = b"".join(np.ascontiguousarray(a, dtype="<i8").tobytes() for a in arrays)
        return MAGIC + _LEN.pack(len(head)) + head + body

    @classmethod
    def from_bytes(cls, blob: bytes) -> KeptSets:
        head, bounds, users, caps = _columns(blob)
        return cls(head["grid_ids"], head["versions"], bounds, users, caps)

    def as_json(self) -> dict[str, dict]:
        """``{grid_id: {"version": v, "users": {user: Γ}}}``, the JSON shape of rows stored
        before migration 0012 (for comparisons)."""
        b = self.bounds.tolist()
        users, caps = self.users.tolist(), self.caps.tolist()
        out = {}
        for i, (gid, v) in enumerate(zip(self.grid_ids, self.versions, strict=True)):
            pairs = zip(users[b[i] : b[i + 1]], caps[b[i] : b[i + 1]], strict=True)
            out[gid] = {"version": v, "users": dict(pairs)}
        return out


def _columns(blob: bytes) -> tuple[dict[str, list], np.ndarray, np.ndarray, np.ndarray]:
    if not blob.startswith(MAGIC):
        raise ValueError("kept sets in an unknown format (migrate the database)")
    start = len(MAGIC) + _LEN.size
    (n_head,) = _LEN.unpack_from(blob, len(MAGIC))
    head = orjson.loads(blob[start : start + n_head])
    data = np.frombuffer(blob, dtype="<i8", offset=start + n_head)
    n_grids = len(head["grid_ids"])
    bounds = data[: n_grids + 1]
    n_pairs = (data.size - n_grids - 1) // 2
    users = data[n_grids + 1 : n_grids + 1 + n_pairs]
    return head, bounds, users, data[n_grids + 1 + n_pairs :]


def kept_caps(blob: bytes, grid_id: str, user_ids: np.ndarray) -> tuple[int, np.ndarray] | None:
    """``(version, Γ of each of user_ids)`` of grid ``grid_id`` (0 for a user not kept),
    or ``None`` if the release did not release that grid."""
    head, bounds, users, caps = _columns(blob)
    try:
        i = head["grid_ids"].index(grid_id)
    except ValueError:
        return None
    a, b = int(bounds[i]), int(bounds[i + 1])
    version, wanted = int(head["versions"][i]), np.asarray(user_ids, dtype=np.int64)
    if a == b:
        return version, np.zeros(wanted.size, dtype=np.int64)
    order = np.argsort(users[a:b], kind="stable")
    mine, theirs = users[a:b][order], caps[a:b][order]
    at = np.minimum(np.searchsorted(mine, wanted), mine.size - 1)
    return version, np.where(mine[at] == wanted, theirs[at], 0).astype(np.int64)
