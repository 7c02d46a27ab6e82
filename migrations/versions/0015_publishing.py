"""Publishing: a dataset's ``value_unit`` and a release's ``public`` flag.

``datasets.value_unit`` (nullable text) is echoed as ``unit`` in every statistic answer,
export and map. ``slot_releases.public`` says whether a release is read without a key. The partial indexes serve
``GET /public/releases`` newest first (of all datasets, and of one), touching public
rows only.

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("datasets", sa.Column("value_unit", sa.String(length=40), nullable=True))
    op.add_column(
        "slot_releases",
        sa.Column("public", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index(
        "ix_slot_releases_public_created_at",
        "slot_releases",
        ["created_at", "id"],
        postgresql_where=sa.text("public"),
    )
    op.create_index(
        "ix_slot_releases_public_dataset_id_created_at",
        "slot_releases",
        ["dataset_id", "created_at", "id"],
        postgresql_where=sa.text("public"),
    )


def downgrade() -> None:
    op.drop_index("ix_slot_releases_public_dataset_id_created_at", table_name="slot_releases")
    op.drop_index("ix_slot_releases_public_created_at", table_name="slot_releases")
    op.drop_column("slot_releases", "public")
    op.drop_column("datasets", "value_unit")
