"""A stored release's CSV and GeoJSON, rendered once and kept (``app.releases.exports_store``).

One row per release and format: the export's bytes as one zstd frame (packed by the app,
so stored as they come: ``STORAGE EXTERNAL``) and the version of the code that rendered
it. Dropped with its release.

Revision ID: 0018
Revises: 0017
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "release_exports",
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("renderer", sa.String(length=64), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["release_id"], ["slot_releases.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("release_id", "format"),
    )
    op.execute("ALTER TABLE release_exports ALTER COLUMN body SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.drop_table("release_exports")
