"""A dataset's releases, listed newest first (issue 23).

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


INDEX = "ix_slot_releases_dataset_id_created_at"


def upgrade() -> None:
    # GET /datasets/{id}/releases orders by (created_at, id) descending within a dataset:
    # one backward index range scan, however many releases other datasets have.
    op.create_index(INDEX, "slot_releases", ["dataset_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="slot_releases")
