from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import numpy as np
import orjson
from sqlalchemy import (
    JSON,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, Epsilon, UTCDateTime, utcnow
from app.releases.kept_sets import KeptSets, kept_caps
from app.releases.packing import pack, unpack

# How the grids are written: as ``app.db.engine.json_dumps`` writes JSON columns (keys
# become strings, NaN becomes null), but as bytes.
ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS
_NO_GRIDS = b'"grids":null'
#: The shape of the grids this code writes, served as stored (``grids_shape``, migration
#: 0014): every statistic answer with ``privacy_unit`` and ``unit`` (2), every grid with
#: ``h3_resolution``, ``slot_start`` and ``n_users``. Raise it when a field is added.
GRIDS_SHAPE = 2


def around_grids(head: dict[str, Any]) -> tuple[bytes, bytes]:
    """The JSON of ``head`` before and after the value of its ``grids``."""
    encoded = orjson.dumps({**head, "grids": None})
    at = encoded.index(_NO_GRIDS)  # the first one is the key: in a string it is escaped
    return encoded[:at] + b'"grids":', encoded[at + len(_NO_GRIDS) :]


def with_grids_json(head: dict[str, Any], grids_json: bytes) -> bytes:
    """The JSON of ``head`` with ``grids_json`` spliced in as its ``grids`` (``head``
    has ``"grids": None`` in their place): a release's grids are served as stored,
    never decoded and encoded again (a day: 240 MB)."""
    before, after = around_grids(head)
    return b"".join((before, grids_json, after))


class SlotRelease(Base):
    """A stored release of one timeslot, with the kept sets of its plan (migration 0011).

    The answer is stored in two parts: ``head``, the answer with ``"grids": null`` in
    place of its grids (small: the listing reads it), and ``grids``, the grids' JSON
    (orjson) packed by :mod:`app.releases.packing` (migration 0013); ``n_grids`` counts
    them. ``kept`` (:mod:`app.releases.kept_sets`' format, packed too; read only by
    ``plan=``) gives each released grid's version and its kept users' Γ, so later
    single-grid queries can reuse the plan (``plan=<release id>``). :meth:`store`,
    :meth:`answer` and :meth:`kept_caps` are the one place that converts between this
    shape and the answer.
    """

    __tablename__ = "slot_releases"
    __table_args__ = (
        UniqueConstraint("dataset_id", "epoch", "fingerprint"),
        # GET /datasets/{id}/releases, newest first (migration 0008)
        Index("ix_slot_releases_dataset_id_created_at", "dataset_id", "created_at", "id"),
        # GET /public/releases, newest first, of all datasets and of one (migration 0015)
        Index(
            "ix_slot_releases_public_created_at",
            "created_at",
            "id",
            postgresql_where=text("public"),
        ),
        Index(
            "ix_slot_releases_public_dataset_id_created_at",
            "dataset_id",
            "created_at",
            "id",
            postgresql_where=text("public"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    public_id: Mapped[str] = mapped_column(String(32), unique=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    slot_start: Mapped[datetime] = mapped_column(UTCDateTime())
    fingerprint: Mapped[str] = mapped_column(String(64))
    epsilon: Mapped[Decimal] = mapped_column(Epsilon)
    head: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_grids: Mapped[int] = mapped_column(Integer)
    # loaded apart (ReleaseRepository.with_grids reads them as a binary result)
    grids: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    kept: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)  # loaded when read
    # GRIDS_SHAPE when stored by this code; 0: stored before 0014, upgraded when served
    grids_shape: Mapped[int] = mapped_column(SmallInteger, server_default="0")
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id"))
    # read by anyone without a key (PATCH /releases/{id}, migration 0015)
    public: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    def store(self, answer: dict[str, Any], kept: KeptSets) -> bytes:
        """Keep ``answer`` (its ``grids`` apart) and ``kept``, packed
        (:mod:`app.releases.packing`); the grids' JSON bytes are returned too (a new
        release's response reuses them)."""
        self.head = {**answer, "grids": None}  # grids keeps its place among the keys
        self.n_grids = len(answer["grids"])
        grids_json = orjson.dumps(answer["grids"], option=ORJSON_OPTIONS)
        self.grids = pack(grids_json)
        self.grids_shape = GRIDS_SHAPE
        self.kept = pack(kept.to_bytes())
        return grids_json

    def grids_json(self) -> bytes:
        """The grids' JSON as stored (unpacked)."""
        return unpack(self.grids)

    def answer(self) -> dict[str, Any]:
        """The answer as it was stored: the head with its grids back in place."""
        return {**self.head, "grids": orjson.loads(self.grids_json())}

    def kept_caps(self, grid_id: str, user_ids: np.ndarray) -> tuple[int, np.ndarray] | None:
        """``(version, Γ of each user)`` of a released grid, ``None`` for another
        (:func:`app.releases.kept_sets.kept_caps`)."""
        return kept_caps(unpack(self.kept), grid_id, user_ids)
