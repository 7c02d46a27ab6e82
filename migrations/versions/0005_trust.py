"""Trust hardening (issue 16): secret fingerprint, value filter policy, key revocation, idempotency request hashes.

* ``dpgate_instance``: one row holding the keyed fingerprint of the hashing secret the
  database was first used with (and, when no secret is configured on Postgres, the
  generated secret itself).
* ``datasets.value_filters_public``: whether value-based upload filters are allowed.
* ``api_keys.revoked_at``: revoked keys answer 401.
* ``uploads.request_hash`` and ``idempotent_requests``: an ``Idempotency-Key`` reused
  with a different request is refused.

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dpgate_instance",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("secret_fingerprint", sa.String(length=64), nullable=False),
        sa.Column("generated_secret", sa.String(length=128), nullable=True),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dpgate_instance")),
    )
    op.create_table(
        "idempotent_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idempotent_requests")),
        sa.UniqueConstraint("scope", "idempotency_key", name=op.f("uq_idempotent_requests_scope")),
    )
    op.add_column(
        "datasets",
        sa.Column("value_filters_public", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "api_keys",
        sa.Column("revoked_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
    )
    op.add_column("uploads", sa.Column("request_hash", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("uploads") as batch:
        batch.drop_column("request_hash")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("revoked_at")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("value_filters_public")
    op.drop_table("idempotent_requests")
    op.drop_table("dpgate_instance")
